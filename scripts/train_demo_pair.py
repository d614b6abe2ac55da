"""Train the embedded stdlib pair into assets/models (same as `tevviz train-demo-pair`)."""

import sys

from tevviz.demo_pair import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
