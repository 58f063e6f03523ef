"""Rewrites the README's list of the ONNX operators nexus.onnx runs (between the onnx-ops markers)
from nexus.onnx.supported_ops(); tests/python/test_onnx_import.py checks it is current.

    python tools/onnx_ops.py
"""

import pathlib

import nexus as nx

START, END = "<!-- onnx-ops -->", "<!-- /onnx-ops -->"


def main() -> None:
    readme = pathlib.Path(__file__).resolve().parents[1] / "README.md"
    text = readme.read_text()
    head, rest = text.split(START, 1)
    tail = rest.split(END, 1)[1]
    listed = ", ".join(f"`{op}`" for op in nx.onnx.supported_ops())
    readme.write_text(f"{head}{START}\n{listed}\n{END}{tail}")


if __name__ == "__main__":
    main()
