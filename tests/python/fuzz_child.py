"""The child process both fuzzers (test_fuzz_api.py, test_fuzz_models.py) run their calls in:
fuzz_worker.py, started again after a crash, so that a crash fails the test with the exact call."""

import json
import os
import subprocess
import sys
from pathlib import Path

EXAMPLES = int(os.environ.get("NEXUS_FUZZ_EXAMPLES", "400"))
WORKER = Path(__file__).with_name("fuzz_worker.py")
# The outcomes a call may have: it returned, was skipped (a real allocation of gigabytes), or
# raised one of the documented exceptions. Anything else (a crash, another exception, a result
# that differs from numpy's) is a finding.
DOCUMENTED = (ValueError, TypeError, IndexError, MemoryError, OverflowError, ZeroDivisionError)
ALLOWED = {"ok", "skipped"} | {e.__name__ for e in DOCUMENTED}


class Worker:
    """The child process the calls run in, started again after a crash."""

    def __init__(self):
        self.proc = None

    def run(self, c: dict) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen([sys.executable, str(WORKER)], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True)
        try:
            self.proc.stdin.write(json.dumps(c) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            code = self.proc.wait()
            self.close()
            return {"outcome": "crash", "message": f"the child exited with status {code}"}
        return json.loads(line)

    def close(self):
        if self.proc is None:
            return
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except BrokenPipeError:  # the child is gone: nothing left to flush
                pass
        self.proc.wait()
        self.proc = None
