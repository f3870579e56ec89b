#!/usr/bin/env python3
"""Machine-code size of every kernel of one .cu file at two revisions, compiled for sm_90a.

usage: scripts/cubin-diff.py [--rename-b REGEX REPL] FILE.cu [REV_A [REV_B]]
       scripts/cubin-diff.py --builds OLD_BUILD NEW_BUILD [TARGET [OLD_TARGET]]
  REV_A defaults to HEAD, REV_B to the working tree ("-" also names the working tree).
  --builds compares the kernels of a library target's objects (default mxserve_kernels_cuda) in
  two CMake build trees, as built: every kernel of NEW_BUILD's must be in OLD_BUILD's at the same
  size; OLD_BUILD's kernels that NEW_BUILD's target no longer holds are counted (moved or gone).
  OLD_TARGET (default TARGET) names the old build's target, for kernels that moved to another.
  --rename-b rewrites REV_B's kernel names (re.sub) before they are matched with REV_A's: for a
  change that adds a template parameter, e.g. --rename-b 'ELb0EEEv' 'EEEv' when a last bool
  parameter is added whose false keeps the old code.

Prints each kernel whose text section differs in size between the two builds, then a count;
--builds also compares each kernel's code bytes with the words its relocations patch masked
(symbol and constant addresses, filled in at load), and counts the kernels whose code is not
byte-identical: the proof that a change left a kernel's machine code as it was. Kernels are
matched by name and architecture (a multi-architecture build has one image per sm). The
check for a refactor that should not change the kernels: the PTX can stay the same (modulo
register numbers) while ptxas emits different code: a helper refactor once left the PTX equal
but for a few prologue instructions, changed the size of 66 of the 96 wgmma kernels, and made
4096 tokens 4.5 % slower. Equal sizes are not proof of equal code (the bytes
always differ: embedded addresses), but a size change is proof of a different schedule.
Needs nvcc (CUDA_HOME or /usr/local/cuda), readelf and objcopy; builds nothing else.
"""
import os
import re
import struct
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

ROOT = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                      check=True).stdout.strip()
NVCC = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")
FLAGS = ["-O3", "-DNDEBUG", "-gencode=arch=compute_90a,code=sm_90a", "-Xcompiler=-fPIC",
         "--expt-relaxed-constexpr", "-std=c++17", "-cubin"]


def tree_of(rev, tmp):
    """The source root of `rev`: the working tree, or an export of the revision under tmp."""
    if rev == "-":
        return ROOT
    out = os.path.join(tmp, re.sub(r"[^\w.-]", "_", rev))
    os.makedirs(out)
    archive = subprocess.run(["git", "-C", ROOT, "archive", rev], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", out], input=archive, check=True)
    return out


def kernel_sizes(cubin):
    """{kernel name with the anonymous-namespace hash removed: text bytes}."""
    listing = subprocess.run(["readelf", "-SW", cubin], capture_output=True, text=True).stdout
    sizes = {}
    for line in listing.splitlines():
        m = re.search(r"\]\s+\.text\.(\S+)\s+PROGBITS\s+\S+\s+[0-9a-f]+\s+([0-9a-f]+)", line)
        if m:
            sizes[re.sub(r"\d*_GLOBAL__N__\w+?_cu_[0-9a-f]+", "_GN_", m.group(1))] = int(m.group(2), 16)
    return sizes


def elf_sections(elf):
    """{section name: (type, bytes)} of an ELF64 image."""
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    hdrs = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    names = hdrs[shstrndx][4]

    def name(off):
        return elf[names + off:elf.index(b"\0", names + off)].decode()
    return {name(h[0]): (h[1], elf[h[4]:h[4] + h[5]]) for h in hdrs}


def elf_sm(elf):
    """The sm of a CUDA ELF image: e_flags bits 8-15 from ABI version 8 (CUDA 12.8+), else 0-7."""
    flags, = struct.unpack_from("<I", elf, 0x30)
    return (flags >> 8) & 0xFF if elf[8] >= 8 else flags & 0xFF


def kernel_code(elf):
    """{(sm, kernel name as kernel_sizes gives it): code bytes with relocated words zeroed}."""
    secs = elf_sections(elf)
    sm = elf_sm(elf)
    code = {}
    for n, (_, data) in secs.items():
        if not n.startswith(".text."):
            continue
        masked = bytearray(data)
        for rel, entry in ((".rel" + n, 16), (".rela" + n, 24)):
            table = secs.get(rel, (0, b""))[1]
            for i in range(0, len(table), entry):
                off, = struct.unpack_from("<Q", table, i)
                masked[off:off + 8] = bytes(len(masked[off:off + 8]))
        code[(sm, re.sub(r"\d*_GLOBAL__N__\w+?_cu_[0-9a-f]+", "_GN_", n[6:]))] = bytes(masked)
    return code


def build(src_root, rel, tmp, tag):
    cubin = os.path.join(tmp, tag + ".cubin")
    includes = ["-I" + src_root, "-isystem=" + os.path.join(os.path.dirname(os.path.dirname(NVCC)), "include")]
    r = subprocess.run([NVCC, *includes, *FLAGS, os.path.join(src_root, rel), "-o", cubin],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"nvcc failed for {tag}:\n{r.stderr[-4000:]}")
    return kernel_sizes(cubin)


def elf_cubins(blob):
    """The CUDA ELF images in blob (a .nv_fatbin section: fatbin headers, then entries of kind 2,
    each raw or zstd-compressed)."""
    out, off = [], 0
    while off + 16 <= len(blob):
        magic, _, header, size = struct.unpack_from("<IHHQ", blob, off)
        if magic != 0xBA55ED50:
            break
        p, end = off + header, off + header + size
        while p < end:
            kind, _, entry_header, payload = struct.unpack_from("<HHIQ", blob, p)
            data = blob[p + entry_header:p + entry_header + payload]
            if kind == 2:
                if data[:4] == b"\x28\xb5\x2f\xfd":
                    data = subprocess.run(["zstd", "-d", "-c", "-q"], input=data, capture_output=True).stdout
                if data[:4] == b"\x7fELF":
                    out.append(data)
            p += entry_header + payload
        off = end
    return out


def build_kernels(build, target, tmp, tag):
    """{(sm, kernel): text bytes} and {(sm, kernel): masked code} over the objects of `target` in
    CMake build tree `build`."""
    objdir = next((os.path.join(r, d) for r, ds, _ in os.walk(build) for d in ds if d == target + ".dir"), None)
    if objdir is None:
        sys.exit(f"no {target}.dir under {build}")
    sizes, code = {}, {}
    for root, _, files in os.walk(objdir):
        for f in sorted(files):
            if not f.endswith(".cu.o"):
                continue
            fb = os.path.join(tmp, f"{tag}-{f}.fatbin")
            subprocess.run(["objcopy", "-O", "binary", "--only-section=.nv_fatbin", os.path.join(root, f), fb],
                           check=True)
            for n, elf in enumerate(elf_cubins(open(fb, "rb").read())):
                cubin = os.path.join(tmp, f"{tag}-{f}-{n}.cubin")
                open(cubin, "wb").write(elf)
                sm = elf_sm(elf)
                sizes.update({(sm, k): v for k, v in kernel_sizes(cubin).items()})
                code.update(kernel_code(elf))
    return sizes, code


def compare_builds(old, new, target, old_target):
    with tempfile.TemporaryDirectory() as tmp:
        a, ca = build_kernels(old, old_target, tmp, "old")
        b, cb = build_kernels(new, target, tmp, "new")
    changed = [n for n in sorted(b) if n in a and a[n] != b[n]]
    added = [n for n in sorted(b) if n not in a]
    recoded = [n for n in sorted(cb) if n in ca and ca[n] != cb[n]]
    for n in changed:
        print(f"{a[n]:>8} {b[n]:>8}  sm_{n[0]} {n[1]}")
    for n in added:
        print(f"       - {b[n]:>8}  sm_{n[0]} {n[1]}")
    for n in recoded:
        if n not in changed:
            print(f"  code differs (same size)  sm_{n[0]} {n[1]}")
    gone = len(set(a) - set(b))
    print(f"{new}'s {target}: {len(b)} kernels; {len(changed)} differ in size from {old}'s {old_target}, "
          f"{len(recoded)} in code bytes, {len(added)} are not there; "
          f"{gone} of its {len(a)} kernels are not in {new}'s {target}")
    return 1 if changed or added or recoded else 0


def main():
    args = sys.argv[1:]
    if args and args[0] == "--builds":
        if len(args) not in (3, 4, 5):
            sys.exit(__doc__)
        target = args[3] if len(args) >= 4 else "mxserve_kernels_cuda"
        return compare_builds(args[1], args[2], target, args[4] if len(args) == 5 else target)
    rename = None
    if len(args) >= 3 and args[0] == "--rename-b":
        rename, args = (args[1], args[2]), args[3:]
    if len(args) < 1 or len(args) > 3:
        sys.exit(__doc__)
    rel = os.path.relpath(os.path.abspath(args[0]), ROOT)
    rev_a = args[1] if len(args) > 1 else "HEAD"
    rev_b = args[2] if len(args) > 2 else "-"
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(2) as pool:
        roots = [tree_of(rev_a, tmp), tree_of(rev_b, tmp)]
        a, b = pool.map(lambda i: build(roots[i], rel, tmp, "ab"[i]), range(2))
    if rename:
        b = {re.sub(rename[0], rename[1], name): size for name, size in b.items()}
    changed = 0
    for name in sorted(set(a) | set(b)):
        sa, sb = a.get(name), b.get(name)
        if sa != sb:
            changed += 1
            print(f"{sa if sa is not None else '-':>8} {sb if sb is not None else '-':>8}  {name}")
    label_b = "working tree" if rev_b == "-" else rev_b
    print(f"{rel}: {changed} of {len(set(a) | set(b))} kernels differ in size ({rev_a} -> {label_b})")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
