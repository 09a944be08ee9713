"""`python benchmarks/gpu_check` (the folder) or `python -m benchmarks.gpu_check`."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if sys.path and Path(sys.path[0] or ".").resolve() == HERE:
    # Run as a folder: import it as the package from the repository root, so that its modules
    # (bench, train, ...) are never importable under their bare names.
    sys.path[0] = str(HERE.parents[1])

from benchmarks.gpu_check.run import main  # noqa: E402

sys.exit(main())
