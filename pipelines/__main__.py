"""`python -m pipelines compile [--check]`: compile every pipeline into compiled/.

The pipelines themselves arrive with the components (issues 4 and 5); until then there is
nothing to compile and `--check` passes trivially.
"""

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines")
    sub = parser.add_subparsers(dest="command", required=True)
    comp = sub.add_parser("compile", help="compile every pipeline into compiled/")
    comp.add_argument("--check", action="store_true", help="fail if compiled/ is stale")
    sub.add_parser("list", help="list the pipelines")
    parser.parse_args(argv)
    print("no pipelines yet")
    return 0


if __name__ == "__main__":
    sys.exit(main())
