# /// script
# requires-python = ">=3.11"
# dependencies = ["cyclopts>=3"]
# ///
"""Say hello: the smallest useful silica tool.

Metadata:
    category: example
    tags: demo, text
    long_running: false
"""

import json
import sys
from pathlib import Path

import cyclopts

sys.path.insert(0, str(Path(__file__).parent))
from _silica_toolspec import generate_schema  # noqa: E402

app = cyclopts.App()


@app.default
def hello(name: str = "World", excited: bool = False):
    """Greet someone by name.

    Args:
        name: Who to greet.
        excited: End the greeting with an exclamation mark.
    """
    print(f"Hello, {name}{'!' if excited else '.'}")


if __name__ == "__main__":
    if "--toolspec" in sys.argv:
        print(json.dumps(generate_schema(hello)))
    else:
        app()
