"""LLM.generate's progress bar: tqdm when it is installed, else one line
on stderr redrawn at most a few times a second."""

import sys
import time


class _PlainBar:
    def __init__(self, total, desc):
        self.total, self.desc, self.n = total, desc, 0
        self._start = self._drawn = time.monotonic()

    def update(self, k):
        self.n += k
        now = time.monotonic()
        if now - self._drawn >= 0.2 or self.n == self.total:
            self._drawn = now
            rate = self.n / max(now - self._start, 1e-9)
            sys.stderr.write(f"\r{self.desc}: {self.n}/{self.total} [{rate:.2f} it/s]")
            sys.stderr.flush()

    def close(self):
        sys.stderr.write("\n")
        sys.stderr.flush()


class ProgressBar:
    """Called as progress(done, total) after every engine step."""

    def __init__(self, total, desc="Processed prompts"):
        try:
            from tqdm.auto import tqdm
            self._bar = tqdm(total=total, desc=desc, dynamic_ncols=True)
        except ImportError:
            self._bar = _PlainBar(total, desc)
        self._done = 0

    def __call__(self, done, total):
        if done > self._done:
            self._bar.update(done - self._done)
            self._done = done

    def close(self):
        self._bar.close()
