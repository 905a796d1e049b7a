"""chorusrun across hosts: two network namespaces joined by a veth pair stand in for two hosts,
and `ip netns exec {host} sh -c` stands in for ssh. Ranks are placed host by host, meet in the
TCP store rank 0 serves, and run verified collectives across the namespaces (shared memory within
one, TCP between them); a rank failing on the second host is reported by number.

Needs root and iproute2 (network namespaces). Without them every test prints "SKIPPED: <why>",
which the test summary counts as skipped."""

import os
import socket
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
CHORUSRUN = os.path.join(ROOT, "integrations", "launcher", "chorusrun.py")
CHORUS_BENCH = os.path.join(ROOT, "benchmarks", "chorus_bench")
RSH = "ip netns exec {host} sh -c"
RUN_LIMIT_SECONDS = 150
QUICK = ["-b", "8", "-e", "64K", "-f", "8", "-n", "2", "-w", "1", "--limits", "0"]


def ip(*args):
    return subprocess.run(["timeout", "20", "ip"] + list(args), capture_output=True, text=True)


class TwoHosts:
    """Namespaces <prefix>0 (10.232.<k>.1) and <prefix>1 (10.232.<k>.2), joined by a veth pair."""

    def __init__(self):
        self.prefix = "chorus-mh%d-" % os.getpid()
        veth = "cmh%d" % (os.getpid() % 100000)  # interface names stop at 15 characters
        subnet = os.getpid() % 250
        self.names = [self.prefix + "0", self.prefix + "1"]
        self.addresses = ["10.232.%d.1" % subnet, "10.232.%d.2" % subnet]
        self.made = []
        steps = []
        for name in self.names:
            steps.append(("netns", "add", name))
        steps.append(("link", "add", veth + "a", "type", "veth", "peer", "name", veth + "b"))
        for index, (name, end) in enumerate(zip(self.names, ("a", "b"))):
            steps += [("link", "set", veth + end, "netns", name),
                      ("-n", name, "addr", "add", self.addresses[index] + "/24", "dev",
                       veth + end),
                      ("-n", name, "link", "set", veth + end, "up"),
                      ("-n", name, "link", "set", "lo", "up")]
        for step in steps:
            result = ip(*step)
            if result.returncode != 0:
                self.close()
                raise OSError("'ip %s' failed: %s" % (" ".join(step), result.stderr.strip()))
            if step[:2] == ("netns", "add"):
                self.made.append(step[2])

    def close(self):
        for name in self.made:
            ip("netns", "delete", name)  # its end of the veth pair goes with it
        self.made = []


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AcrossHosts(unittest.TestCase):
    hosts = None
    skip_reason = None

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            cls.skip_reason = "network namespaces need root"
            return
        try:
            cls.hosts = TwoHosts()
        except OSError as error:
            cls.skip_reason = "cannot create network namespaces: %s" % error

    @classmethod
    def tearDownClass(cls):
        if cls.hosts is not None:
            cls.hosts.close()

    def setUp(self):
        if self.skip_reason is not None:
            print("SKIPPED: %s: %s" % (self.id(), self.skip_reason), file=sys.stderr)
            self.skipTest(self.skip_reason)

    def chorusrun(self, *args):
        store = "tcp://%s:%d" % (self.hosts.addresses[0], free_port())
        return subprocess.run(
            [sys.executable, CHORUSRUN, "--rsh", RSH, "--store-url", store,
             "--timeout", str(RUN_LIMIT_SECONDS - 30)] + list(args),
            capture_output=True, text=True, timeout=RUN_LIMIT_SECONDS)

    def test_ranks_are_placed_host_by_host_with_local_ranks(self):
        with tempfile.NamedTemporaryFile("w", suffix=".hosts") as hostfile:
            hostfile.write("# first host takes one rank\n%s slots=1\n%s:3\n" % tuple(self.hosts.names))
            hostfile.flush()
            result = self.chorusrun(
                "--hostfile", hostfile.name, "-n", "3", "--", "sh", "-c",
                'echo "$CHORUS_RANK $CHORUS_SIZE $CHORUS_LOCAL_RANK $CHORUS_LOCAL_SIZE '
                '$(ip netns identify) $CHORUS_STORE"')
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = sorted(line for line in result.stdout.splitlines() if line.startswith("[rank"))
        store = lines[0].split()[-1]
        self.assertTrue(store.startswith("tcp://"), lines)
        self.assertEqual(lines, [
            "[rank 0] 0 3 0 1 %s %s" % (self.hosts.names[0], store),
            "[rank 1] 1 3 0 2 %s %s" % (self.hosts.names[1], store),
            "[rank 2] 2 3 1 2 %s %s" % (self.hosts.names[1], store),
        ])

    def test_collectives_verify_across_two_hosts(self):
        hosts = "%s:2,%s:2" % tuple(self.hosts.names)
        for collective in ("allreduce", "allgather", "broadcast"):
            with self.subTest(collective=collective):
                result = self.chorusrun("--hosts", hosts, "--", CHORUS_BENCH, *QUICK,
                                        "--coll", collective, "--transport", "auto")
                self.assertEqual(result.returncode, 0, result.stderr + result.stdout)
                rows = [line.split()[2:] for line in result.stdout.splitlines()
                        if line.startswith("[rank 0] ") and line.split()[2].isdigit()]
                self.assertGreater(len(rows), 0, result.stdout)
                for row in rows:
                    self.assertEqual((row[8], row[12]), ("0", "0"), row)  # #wrong, both modes

    def test_a_job_secret_and_tls_secure_every_link_across_hosts(self):
        # Ranks on both hosts and the TCP store rank 0 serves all prove the secret and run TLS;
        # a rank whose secret differs is refused, and the job fails naming the reason.
        certificates = os.path.join(ROOT, "tests", "security", "testdata")
        tls = {"CHORUS_TLS_CERT": os.path.join(certificates, "member.pem"),
               "CHORUS_TLS_KEY": os.path.join(certificates, "member.key"),
               "CHORUS_TLS_CA": os.path.join(certificates, "ca.pem")}
        hosts = "%s:1,%s:1" % tuple(self.hosts.names)
        with tempfile.NamedTemporaryFile("w", suffix=".key") as secret:
            secret.write("a-job-secret-for-the-multihost-test\n")
            secret.flush()
            os.chmod(secret.name, 0o600)
            env = dict(tls, CHORUS_AUTH_KEY_FILE=secret.name)
            result = self.chorusrun_with(env, "--hosts", hosts, "--", CHORUS_BENCH, *QUICK,
                                         "--transport", "tcp")
            self.assertEqual(result.returncode, 0, result.stderr + result.stdout)
            self.assertIn("Wrong elements       : 0 OK", result.stdout)
            # The secret itself is never put on a remote command line, where ps shows it.
            result = self.chorusrun_with(dict(tls, CHORUS_AUTH_KEY="a-job-secret-0123456789"),
                                         "--hosts", hosts, "--", "true")
            self.assertEqual(result.returncode, 1, result.stderr)
            self.assertIn("CHORUS_AUTH_KEY_FILE", result.stderr)

    def chorusrun_with(self, env, *args):
        saved = {name: os.environ.get(name) for name in env}
        os.environ.update(env)
        try:
            return self.chorusrun(*args)
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name)
                else:
                    os.environ[name] = value

    def test_torchrun_variables_need_no_launcher(self):
        # What torchrun (or an srun script exporting MASTER_ADDR/MASTER_PORT) gives each
        # process: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and the master's address.
        # The ranks find the store rank 0 serves on MASTER_PORT + 1 with no CHORUS_* setting.
        master_port = free_port()
        processes = []
        for rank in range(4):
            host = self.hosts.names[rank // 2]
            env = {name: value for name, value in os.environ.items()
                   if not name.startswith("CHORUS_")}
            env.update(RANK=str(rank), WORLD_SIZE="4", LOCAL_RANK=str(rank % 2),
                       LOCAL_WORLD_SIZE="2", MASTER_ADDR=self.hosts.addresses[0],
                       MASTER_PORT=str(master_port))
            processes.append(subprocess.Popen(
                ["ip", "netns", "exec", host, CHORUS_BENCH] + QUICK +
                ["--coll", "allreduce", "--transport", "auto"],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        outputs = []
        try:
            for process in processes:
                outputs.append(process.communicate(timeout=RUN_LIMIT_SECONDS - 30))
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
                    process.wait()
        for rank, (process, (stdout, stderr)) in enumerate(zip(processes, outputs)):
            self.assertEqual(process.returncode, 0, "rank %d: %s" % (rank, stderr))
        rows = [line.split() for line in outputs[0][0].splitlines()
                if line.split() and line.split()[0].isdigit()]
        self.assertGreater(len(rows), 0, outputs[0][0])
        for row in rows:
            self.assertEqual((row[8], row[12]), ("0", "0"), row)  # #wrong, both modes
        self.assertIn("transport auto, store tcp, 4 ranks", outputs[0][0])

    def test_a_rank_failing_on_the_second_host_is_named(self):
        hosts = "%s:2,%s:2" % tuple(self.hosts.names)
        result = self.chorusrun("--hosts", hosts, "--", "sh", "-c",
                                '[ "$CHORUS_RANK" = 3 ] && exit 5; sleep 60')
        self.assertEqual(result.returncode, 103, result.stderr)
        self.assertIn("rank 3 exited with code 5", result.stderr)


if __name__ == "__main__":
    unittest.main()
