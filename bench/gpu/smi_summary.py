#!/usr/bin/env python3
"""Joins the spread step's time-stamped bench rows with nvidia-smi's 100 ms samples.

  smi_summary.py SMI.txt SPREAD.txt

SMI.txt: `nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw.instant,temperature.gpu,
clocks_event_reasons.active --format=csv,noheader -lms 100`. SPREAD.txt: lines
"HH:MM:SS.mmm | shape | tokens | ms | ... | path |" (and "# reps" lines). For each row, the
samples since the previous stamped line (the row's own measurement and setup): the SM clock's
range, the most power, the temperature and the clock-event reasons seen (OR of the masks).
"""
import sys
from datetime import datetime


def seconds(hms):
    h, m, s = hms.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


def main():
    samples = []
    for line in open(sys.argv[1]):
        f = [x.strip() for x in line.split(",")]
        if len(f) < 5:
            continue
        try:
            t = datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f")
            clk = float(f[1].split()[0])
            pw = float(f[2].split()[0])
            temp = float(f[3])
            reasons = int(f[4], 16)
        except ValueError:
            continue
        samples.append((t.hour * 3600 + t.minute * 60 + t.second + t.microsecond * 1e-6, clk, pw, temp, reasons))
    print("| row | ms | samples | SM MHz min-max | W max | C max | event reasons |")
    print("|---|---|---|---|---|---|---|")
    prev = None
    for line in open(sys.argv[2]):
        parts = line.split(" ", 1)
        if len(parts) < 2:
            continue
        try:
            t = seconds(parts[0])
        except ValueError:
            continue
        body = parts[1].strip()
        if body.startswith("|"):
            cells = [c.strip() for c in body.strip("|").split("|")]
            win = [s for s in samples if (prev is None or s[0] > prev) and s[0] <= t]
            if win:
                clk = f"{min(s[1] for s in win):.0f}-{max(s[1] for s in win):.0f}"
                pw = f"{max(s[2] for s in win):.0f}"
                temp = f"{max(s[3] for s in win):.0f}"
                reasons = 0
                for s in win:
                    reasons |= s[4]
                rs = f"0x{reasons:x}"
            else:
                clk = pw = temp = rs = "-"
            print(f"| {cells[1]} {cells[6]} | {cells[2]} | {len(win)} | {clk} | {pw} | {temp} | {rs} |")
        prev = t


if __name__ == "__main__":
    main()
