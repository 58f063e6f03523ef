"""A write that fails half way, as on a full disk: Python code run in a child process whose file
size limit is `limit` bytes (writes past it fail with EFBIG instead of killing the child)."""

import subprocess
import sys


def run_with_file_size_limit(setup: str, write: str, limit: int) -> subprocess.CompletedProcess:
    """Runs ``setup`` freely, then ``write`` under the limit; returns the finished child."""
    code = (f"{setup}\n"
            "import resource, signal\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n"
            f"{write}\n")
    return subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=300)
