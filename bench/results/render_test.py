#!/usr/bin/env python3
"""Checks that docs/PERFORMANCE.md's generated tables match bench/results/*.csv, and that
render.py's check catches a stale table, a file without a block and a malformed file."""

import contextlib
import io
import pathlib
import shutil
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import render  # noqa: E402

GOOD = """# title: a table
# command: bench/x.sh
date,card,commit,tokens,ms
2026-01-02,Card A,abc1234,1,0.5
2026-01-02,Card A,abc1234,16,"1,5"
"""

DOC = """# Doc
<!-- begin generated: results/a.csv -->
stale
<!-- end generated -->
"""


def run(*argv):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = render.main(list(argv))
    return rc, err.getvalue()


class RepositoryDoc(unittest.TestCase):
    def test_performance_md_is_current(self):
        rc, err = run("--check")
        self.assertEqual(rc, 0, err)


class RenderCheck(unittest.TestCase):
    def setUp(self):
        self.dir = pathlib.Path(tempfile.mkdtemp())
        (self.dir / "results").mkdir()
        self.csv = self.dir / "results" / "a.csv"
        self.csv.write_text(GOOD)
        self.doc = self.dir / "doc.md"
        self.doc.write_text(DOC)
        self.args = ["--doc", str(self.doc), "--results", str(self.dir / "results"),
                     "--root", str(self.dir)]

    def tearDown(self):
        shutil.rmtree(self.dir)

    def test_stale_block_fails_then_rewrite_fixes_it(self):
        rc, err = run("--check", *self.args)
        self.assertEqual(rc, 1)
        self.assertIn("results/a.csv", err)
        self.assertEqual(run(*self.args)[0], 0)
        text = self.doc.read_text()
        self.assertIn("**Card A**, 2026-01-02, commit abc1234: a table.", text)
        self.assertIn("| tokens | ms |", text)
        self.assertIn("| 16 | 1,5 |", text)
        self.assertEqual(run("--check", *self.args)[0], 0)

    def test_changed_value_is_caught(self):
        run(*self.args)
        self.csv.write_text(GOOD.replace("0.5", "0.6"))
        rc, err = run("--check", *self.args)
        self.assertEqual(rc, 1)
        self.assertIn("out of date", err)

    def test_rows_of_several_cards_keep_the_card_column(self):
        self.csv.write_text(GOOD.replace("2026-01-02,Card A,abc1234,16", "2026-01-02,Card B,abc1234,16"))
        run(*self.args)
        self.assertIn("| card | tokens | ms |", self.doc.read_text())

    def test_result_without_block_fails(self):
        run(*self.args)
        (self.dir / "results" / "b.csv").write_text(GOOD)
        rc, err = run("--check", *self.args)
        self.assertEqual(rc, 1)
        self.assertIn("b.csv has no generated block", err)

    def test_malformed_results_are_named(self):
        cases = {
            "no date column": GOOD.replace("date,card,commit", "when,card,commit"),
            "is not YYYY-MM-DD": GOOD.replace("2026-01-02,Card A,abc1234,1,", "Jan 2,Card A,abc1234,1,"),
            "fields, the header": GOOD.replace(",16,", ",16,7,"),
            "needs '# title:'": GOOD.replace("# title: a table\n", ""),
            "key: value": GOOD + "# dated: 2026\n",
        }
        for want, text in cases.items():
            with self.subTest(want):
                self.csv.write_text(text)
                rc, err = run("--check", *self.args)
                self.assertEqual(rc, 1)
                self.assertIn("a.csv", err)
        self.csv.write_text(GOOD.replace("date,card,commit", "when,card,commit"))
        self.assertIn("date,card,commit", run("--check", *self.args)[1])


if __name__ == "__main__":
    unittest.main()
