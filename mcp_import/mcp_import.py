"""The mcp import command line; the code lives in importer.py beside this file.

    python -B mcp_import/mcp_import.py --server-command "python server.py" --out DRAFT.json --report REPORT.json

This file is only the entry point: a module named like its folder would be shadowed by the
package when the tests are discovered from the repository root.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import importer  # noqa: E402

if __name__ == "__main__":
    sys.exit(importer.main())
