"""Print the README's Nth shell block (1: run the demo, 2: run the tests), as a user copies it.

    python3 .ci/readme_command.py 1

The same pattern as the before-stop hook's, so CI runs exactly what the README shows.
"""

import re
import sys
from pathlib import Path

blocks = re.findall(
    r"```(?:sh|bash|shell|console)\n(.*?)```",
    (Path(__file__).resolve().parent.parent / "README.md").read_text(),
    re.S,
)
index = int(sys.argv[1])
if len(blocks) < index:
    sys.exit(f"README.md has {len(blocks)} shell blocks; expected the command at block {index}")
print(blocks[index - 1].strip())
