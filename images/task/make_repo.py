"""Writes the task's repository: the package calc with a bug, its tests, and filler files
up to the given count (deterministic, so the image's content follows its recipe)."""
import os
import sys

root, total = sys.argv[1], int(sys.argv[2])

files = {
    ".gitignore": "__pycache__/\n*.egg-info/\n",
    "setup.py": "from setuptools import setup\n\nsetup(name='calc', version='0.1', packages=['calc'], install_requires=['tinyfmt'])\n",
    "README.md": "# calc\n\nSmall statistics helpers. Run the tests with `run_tests.sh`.\n",
    "calc/__init__.py": "from calc.stats import mean, summary\n",
    # The bug: the mean divides by one more than the count.
    "calc/stats.py": (
        "from tinyfmt import fmt_num\n\n\n"
        "def mean(xs):\n"
        "    \"\"\"The arithmetic mean of a non-empty sequence.\"\"\"\n"
        "    return sum(xs) / (len(xs) + 1)\n\n\n"
        "def summary(xs):\n"
        "    return 'mean=' + fmt_num(mean(xs))\n"
    ),
    "tests/__init__.py": "",
    "tests/test_stats.py": (
        "import unittest\n\nfrom calc import mean, summary\n\n\n"
        "class TestStats(unittest.TestCase):\n"
        "    def test_mean(self):\n"
        "        self.assertEqual(mean([1, 2, 3, 4]), 2.5)\n\n"
        "    def test_summary(self):\n"
        "        self.assertEqual(summary([2, 4]), 'mean=3.00')\n\n\n"
        "if __name__ == '__main__':\n"
        "    unittest.main()\n"
    ),
}
filler = total - len(files)
if filler < 0:
    sys.exit(f"make_repo.py: {total} files is fewer than the {len(files)} the package needs")
for i in range(filler):
    files[f"data/d{i // 100:03d}/f{i % 100:02d}.txt"] = f"record {i}\n" + "x" * (i % 400) + "\n"
for name, body in files.items():
    path = os.path.join(root, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(body)
