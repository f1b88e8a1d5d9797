#!/usr/bin/python3
"""Runs a command under a pseudo-terminal and drives it with a script of steps.

    pty_run.py --steps FILE [--out FILE] [--marks FILE] [--status FILE] [--timeout S] -- CMD [ARG...]

CMD runs as the leader of a new session whose controlling terminal is the pty (80x24), as in a
terminal emulator, so ^C and ^Z reach its foreground process group and an interactive shell has
job control. Everything CMD prints goes to --out (raw bytes).

Steps, one per line (blank lines and lines starting with # are skipped):

    expect TIMEOUT REGEX   wait at most TIMEOUT seconds until the output printed since the last
                           match matches REGEX (Python re, on the bytes decoded as Latin-1, in
                           DOTALL mode); the rest of the line is the regex
    send TEXT              write TEXT to the terminal; backslash escapes are decoded
                           (\\x03 is ^C, \\x1a is ^Z, \\r, \\n, \\\\)
    sendline TEXT          TEXT (escapes decoded) followed by a carriage return (Enter)
    sleep S                wait S seconds (output keeps being recorded)
    mark NAME              record the time in --marks
    wait_exit TIMEOUT      wait at most TIMEOUT seconds for CMD to exit

Each step, once done, appends "<CLOCK_MONOTONIC ns> <step line>" to --marks.
CMD's exit status (128+N when it died of signal N) is written to --status when it exits.

Exit status: 0 when every step succeeded; 1 when a step failed (an expect or wait_exit timed
out; the step and the end of the output go to stderr); 2 when the overall --timeout (default
60s) ran out; 64 on a usage error. When the driver ends with CMD still running, CMD's process
group gets SIGKILL.
"""

import argparse
import codecs
import fcntl
import os
import re
import select
import signal
import struct
import sys
import termios
import time


def decode_escapes(text):
    return codecs.decode(text.encode("utf-8"), "unicode_escape").encode("latin-1")


class Driver:
    def __init__(self, args):
        self.args = args
        self.buf = b""
        self.pos = 0
        self.status = None
        self.out = open(args.out, "wb") if args.out else None
        self.marks = open(args.marks, "a") if args.marks else None
        self.deadline = time.monotonic() + args.timeout
        pid, fd = os.forkpty()
        if pid == 0:
            # As a terminal emulator starts a shell: every signal at its default action. The
            # driver itself may have been started with SIGINT and SIGQUIT ignored (a background
            # job of a non-interactive shell), which exec would pass on, and ^C would do nothing.
            for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU,
                        signal.SIGPIPE, signal.SIGXFSZ):
                signal.signal(sig, signal.SIG_DFL)
            try:
                os.execvp(args.cmd[0], args.cmd)
            except OSError as e:
                os.write(2, ("pty_run: cannot run %s: %s\n" % (args.cmd[0], e)).encode())
            os._exit(127)
        self.pid = pid
        self.fd = fd
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        self.eof = False

    def mark(self, text):
        if self.marks:
            self.marks.write("%d %s\n" % (time.monotonic_ns(), text))
            self.marks.flush()

    def reap(self):
        if self.status is not None:
            return True
        pid, st = os.waitpid(self.pid, os.WNOHANG)
        if pid == 0:
            return False
        if os.WIFSIGNALED(st):
            self.status = 128 + os.WTERMSIG(st)
        else:
            self.status = os.WEXITSTATUS(st)
        if self.args.status:
            with open(self.args.status, "w") as f:
                f.write("%d\n" % self.status)
        return True

    def pump(self, seconds):
        """Reads output for at most `seconds` (returns early when something arrived)."""
        if self.eof:
            time.sleep(min(seconds, 0.05))
            self.reap()
            return
        try:
            ready, _, _ = select.select([self.fd], [], [], max(0.0, seconds))
        except InterruptedError:
            return
        if not ready:
            self.reap()
            return
        try:
            data = os.read(self.fd, 65536)
        except OSError:
            data = b""
        if not data:
            self.eof = True
            self.reap()
            return
        self.buf += data
        if self.out:
            self.out.write(data)
            self.out.flush()

    def check_overall(self):
        if time.monotonic() > self.deadline:
            self.fail("the overall timeout of %ss ran out" % self.args.timeout, 2)

    def fail(self, why, code=1):
        sys.stderr.write("pty_run: %s\n" % why)
        tail = self.buf[-1500:].decode("utf-8", "replace")
        sys.stderr.write("pty_run: output so far (end):\n%s\n" % tail)
        self.finish(code)

    def finish(self, code):
        if not self.reap():
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass
            end = time.monotonic() + 5
            while time.monotonic() < end and not self.reap():
                self.pump(0.05)
        if self.out:
            self.out.close()
        sys.exit(code)

    def write(self, data):
        while data:
            n = os.write(self.fd, data)
            data = data[n:]

    def step(self, line):
        word, _, rest = line.partition(" ")
        if word == "expect":
            timeout, _, regex = rest.partition(" ")
            pattern = re.compile(regex, re.DOTALL)
            end = time.monotonic() + float(timeout)
            while True:
                text = self.buf[self.pos:].decode("latin-1")
                m = pattern.search(text)
                if m:
                    self.pos += m.end()
                    break
                now = time.monotonic()
                if now > end:
                    self.fail("step '%s': no match within %ss" % (line, timeout))
                self.check_overall()
                if self.eof and self.reap():
                    self.fail("step '%s': the command exited (status %s) without a match" % (line, self.status))
                self.pump(min(0.05, end - now))
        elif word == "send":
            self.write(decode_escapes(rest))
        elif word == "sendline":
            self.write(decode_escapes(rest) + b"\r")
        elif word == "sleep":
            end = time.monotonic() + float(rest)
            while time.monotonic() < end:
                self.check_overall()
                self.pump(min(0.05, end - time.monotonic()))
        elif word == "mark":
            pass
        elif word == "wait_exit":
            end = time.monotonic() + float(rest)
            while not self.reap():
                if time.monotonic() > end:
                    self.fail("step '%s': the command is still running" % line)
                self.check_overall()
                self.pump(0.05)
            # Collect what is left of the output.
            drain_end = time.monotonic() + 1
            while not self.eof and time.monotonic() < drain_end:
                self.pump(0.05)
        else:
            sys.stderr.write("pty_run: unknown step '%s'\n" % line)
            self.finish(64)
        self.mark(line)

    def run(self, steps):
        for line in steps:
            self.check_overall()
            self.step(line)
        self.finish(0)


def main():
    parser = argparse.ArgumentParser(description="run a command under a pty and drive it")
    parser.add_argument("--steps", required=True)
    parser.add_argument("--out")
    parser.add_argument("--marks")
    parser.add_argument("--status")
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("cmd", nargs="+")
    args = parser.parse_args()
    with open(args.steps) as f:
        steps = [l.rstrip("\n") for l in f if l.strip() and not l.lstrip().startswith("#")]
    Driver(args).run(steps)


if __name__ == "__main__":
    main()
