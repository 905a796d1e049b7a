"""Tests for integrations/launcher/chorusrun.py: run it as a user would, on small rank programs
written in Python, and check its output, exit codes, signal handling and clean-up."""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
CHORUSRUN = os.path.join(HERE, "..", "..", "integrations", "launcher", "chorusrun.py")
# Every run is bounded: a launcher that hangs fails the test instead of stalling it.
RUN_LIMIT_SECONDS = 30


def rank_program(body):
    """A rank program: python3 -c BODY, with os, sys, time, signal imported."""
    return [sys.executable, "-c", "import os, sys, time, signal\n" + body]


def chorusrun(*args, timeout=RUN_LIMIT_SECONDS):
    start = time.monotonic()
    result = subprocess.run([sys.executable, CHORUSRUN] + list(args), capture_output=True,
                            text=True, timeout=timeout)
    result.seconds = time.monotonic() - start
    return result


def start_chorusrun(*args):
    return subprocess.Popen([sys.executable, CHORUSRUN] + list(args), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_for_lines(path, count, limit=RUN_LIMIT_SECONDS):
    """Waits until the file at `path` holds `count` lines (ranks write one when ready)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if os.path.exists(path):
            with open(path) as f:
                if len(f.read().splitlines()) >= count:
                    return
        time.sleep(0.02)
    raise AssertionError("ranks did not all report ready in %s" % path)


def loopback_port_answers(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class OutputAndEnvironment(unittest.TestCase):
    def test_every_line_is_prefixed_with_its_rank_and_the_identity_is_set(self):
        result = chorusrun("-n", "3", *rank_program(
            "print('id', os.environ['CHORUS_RANK'], os.environ['CHORUS_SIZE'],"
            " os.environ['CHORUS_LOCAL_RANK'])\n"
            "print('second line'); print('to stderr', file=sys.stderr)\n"
            "sys.stdout.write('no newline at the end')"))
        self.assertEqual(result.returncode, 0, result.stderr)
        for rank in range(3):
            self.assertIn("[rank %d] id %d 3 %d\n" % (rank, rank, rank), result.stdout)
            self.assertIn("[rank %d] second line\n" % rank, result.stdout)
            self.assertIn("[rank %d] no newline at the end\n" % rank, result.stdout)
            self.assertIn("[rank %d] to stderr\n" % rank, result.stderr)
        self.assertEqual(len(result.stdout.splitlines()), 9)
        for line in result.stdout.splitlines():
            self.assertRegex(line, r"^\[rank [0-2]\] ")

    def test_file_store_directory_exists_while_running_and_is_removed_after(self):
        with tempfile.TemporaryDirectory() as root:
            result = chorusrun("-n", "2", "--store-root", root, *rank_program(
                "url = os.environ['CHORUS_STORE']\n"
                "assert url.startswith('file:///'), url\n"
                "print('dir', url[len('file://'):], os.path.isdir(url[len('file://'):]))"))
            self.assertEqual(result.returncode, 0, result.stderr)
            lines = [l for l in result.stdout.splitlines() if " dir " in l]
            self.assertEqual(len(lines), 2)
            directories = {line.split()[3] for line in lines}
            self.assertEqual(len(directories), 1, "both ranks must share one store")
            directory = directories.pop()
            self.assertTrue(directory.startswith(os.path.join(root, "chorus-")))
            self.assertTrue(all(line.endswith(" True") for line in lines))
            self.assertFalse(os.path.exists(directory))
            self.assertEqual(os.listdir(root), [])

    def test_store_url_is_passed_through_untouched(self):
        result = chorusrun("-n", "2", "--store-url", "redis://10.0.0.1:6379/job7",
                           *rank_program("print(os.environ['CHORUS_STORE'])"))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("[rank 0] redis://10.0.0.1:6379/job7\n", result.stdout)
        self.assertIn("[rank 1] redis://10.0.0.1:6379/job7\n", result.stdout)

    def test_each_rank_leads_a_process_group_in_the_launchers_session(self):
        # One session for all ranks (chorusrun does not start one of its own, so it is this
        # test's): where the kernel groups tasks by session for scheduling, ranks sharing a
        # core then yield it to each other.
        result = chorusrun("-n", "2", *rank_program(
            "print('ids', os.getpid(), os.getpgrp(), os.getsid(0))"))
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = [line.split() for line in result.stdout.splitlines() if " ids " in line]
        self.assertEqual(len(lines), 2, result.stdout)
        for _, _, _, pid, group, session in lines:
            self.assertEqual(group, pid)
            self.assertEqual(int(session), os.getsid(0))

    def test_redis_store_runs_a_private_server_and_stops_it(self):
        result = chorusrun("-n", "2", "--store", "redis", *rank_program(
            "import socket\n"
            "url = os.environ['CHORUS_STORE']\n"
            "host_port, prefix = url[len('redis://'):].split('/', 1)\n"
            "host, port = host_port.rsplit(':', 1)\n"
            "s = socket.create_connection((host, int(port)), timeout=5)\n"
            "s.sendall(b'PING\\r\\n')\n"
            "print('port', port, 'prefix', prefix, 'reply', s.recv(7))"))
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = [l for l in result.stdout.splitlines() if " port " in l]
        self.assertEqual(len(lines), 2, result.stdout)
        self.assertTrue(all("reply b'+PONG\\r\\n'" in line for line in lines), result.stdout)
        port = int(lines[0].split()[3])
        self.assertTrue(lines[0].split()[5].startswith("chorus-"))
        self.assertFalse(loopback_port_answers(port), "the redis server must be stopped")


class Failures(unittest.TestCase):
    def test_a_failing_rank_stops_the_others_and_the_exit_code_names_it(self):
        result = chorusrun("-n", "4", *rank_program(
            "if os.environ['CHORUS_RANK'] == '2':\n"
            "    time.sleep(0.5); sys.exit(7)\n"
            "time.sleep(120)"))
        self.assertEqual(result.returncode, 102, result.stderr)
        self.assertIn("rank 2 exited with code 7", result.stderr)
        self.assertIn("exit code 102", result.stderr)
        self.assertLess(result.seconds, 20)

    def test_the_rank_that_failed_first_is_named_when_another_follows_it_at_once(self):
        # Rank 2 fails; rank 0 notices within a millisecond and fails 10 ms later, as a rank
        # whose peer died does. Rank 2 leaves a short-lived child holding its output open, so
        # its exit closes no pipe and both exits fall within one of the launcher's looks: only
        # the order the exits happened in can name rank 2.
        with tempfile.TemporaryDirectory() as scratch:
            for attempt in range(6):
                marker = os.path.join(scratch, "rank2-failed-%d" % attempt)
                result = chorusrun("-n", "4", *rank_program(
                    "marker = %r\n"
                    "rank = os.environ['CHORUS_RANK']\n"
                    "if rank == '2':\n"
                    "    time.sleep(0.3); os.spawnlp(os.P_NOWAIT, 'sleep', 'sleep', '1')\n"
                    "    open(marker, 'w').close(); os._exit(1)\n"
                    "if rank == '0':\n"
                    "    while not os.path.exists(marker): time.sleep(0.001)\n"
                    "    time.sleep(0.01); os._exit(1)\n"
                    "time.sleep(120)" % marker))
                self.assertEqual(result.returncode, 102, "attempt %d: %s" % (attempt, result.stderr))
                self.assertIn("rank 2 exited with code 1", result.stderr)

    def test_a_rank_killed_by_a_signal_is_a_failure(self):
        result = chorusrun("-n", "2", *rank_program(
            "if os.environ['CHORUS_RANK'] == '1':\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n"
            "time.sleep(120)"))
        self.assertEqual(result.returncode, 101, result.stderr)
        self.assertIn("rank 1 was killed by SIGKILL", result.stderr)
        self.assertLess(result.seconds, 20)

    def test_ranks_from_23_on_share_the_last_code(self):
        result = chorusrun("-n", "25", *rank_program(
            "sys.exit(3 if os.environ['CHORUS_RANK'] == '24' else 0)"))
        self.assertEqual(result.returncode, 123, result.stderr)
        self.assertIn("rank 24 exited with code 3", result.stderr)

    def test_a_rank_that_ignores_sigterm_is_killed_after_the_grace_period(self):
        result = chorusrun("-n", "2", "--grace", "1", *rank_program(
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "if os.environ['CHORUS_RANK'] == '0':\n"
            "    time.sleep(0.3); sys.exit(1)\n"
            "time.sleep(120)"))
        self.assertEqual(result.returncode, 100, result.stderr)
        self.assertIn("killing them", result.stderr)
        self.assertLess(result.seconds, 20)

    def test_timeout_stops_every_rank(self):
        result = chorusrun("-n", "3", "--timeout", "1", *rank_program("time.sleep(120)"))
        self.assertEqual(result.returncode, 124, result.stderr)
        self.assertIn("--timeout 1 s expired with 3 rank(s) running", result.stderr)
        self.assertLess(result.seconds, 20)

    def test_a_program_that_cannot_start_is_a_launcher_error(self):
        result = chorusrun("-n", "2", "/nonexistent/program")
        self.assertEqual(result.returncode, 1)
        self.assertIn("cannot start rank 0", result.stderr)

    def test_a_bad_command_line_is_a_usage_error(self):
        self.assertEqual(chorusrun("-n", "0", "true").returncode, 2)
        self.assertEqual(chorusrun("-n", "2").returncode, 2)


class Signals(unittest.TestCase):
    def _check_forwarded(self, signum, name):
        with tempfile.TemporaryDirectory() as scratch:
            ready = os.path.join(scratch, "ready")
            launcher = start_chorusrun("-n", "3", *rank_program(
                "def on_signal(signum, frame):\n"
                "    print('got', signal.Signals(signum).name, flush=True); sys.exit(0)\n"
                "signal.signal(signal.%s, on_signal)\n"
                "with open(%r, 'a') as f: f.write('ready\\n')\n"
                "time.sleep(120)" % (name, ready)))
            try:
                wait_for_lines(ready, 3)
                start = time.monotonic()
                launcher.send_signal(signum)
                stdout, stderr = launcher.communicate(timeout=RUN_LIMIT_SECONDS)
            finally:
                if launcher.poll() is None:
                    launcher.kill()
                    launcher.wait()
            self.assertLess(time.monotonic() - start, 10)
            self.assertEqual(launcher.returncode, 128 + signum, stderr)
            for rank in range(3):
                self.assertIn("[rank %d] got %s" % (rank, name), stdout)
            self.assertIn("forwarding %s to every rank" % name, stderr)

    def test_sigint_is_forwarded_to_every_rank(self):
        self._check_forwarded(signal.SIGINT, "SIGINT")

    def test_sigterm_is_forwarded_to_every_rank(self):
        self._check_forwarded(signal.SIGTERM, "SIGTERM")


if __name__ == "__main__":
    unittest.main()
