"""The open differences from the file catalog that docs/reliability.md lists, as statement streams
(`open_differences.json`): `python e2e/open_differences.py [NAME]` runs each on both catalogs through
`differential.run` and prints the first difference. Not a test: these streams still differ, and a fix turns
one into a differential test (`test_differential.py`)."""

import json
import os
import sys
import tempfile

import differential

HERE = os.path.dirname(os.path.abspath(__file__))


def main(names):
    with open(os.path.join(HERE, "open_differences.json")) as f:
        streams = json.load(f)
    for name in names or streams:
        with tempfile.TemporaryDirectory(prefix="moraine-open-difference-") as tmp:
            try:
                differential.assert_same(tmp, streams[name], allow_errors=True)
                print("%s: the same on both catalogs now" % name)
            except AssertionError as e:
                print("%s: %s" % (name, str(e)[:2000]))


if __name__ == "__main__":
    main(sys.argv[1:])
