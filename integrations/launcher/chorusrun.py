#!/usr/bin/env python3
"""chorusrun: start R ranks of a program on this host or on several, the way mpirun or torchrun
would.

    chorusrun -n R [--store file|redis] [--store-url URL] [--timeout S] [--] prog args...
    chorusrun --hosts h1:4,h2:4 | --hostfile FILE [-n R] [--rsh CMD] [--store-port P] prog...

Each rank gets CHORUS_RANK, CHORUS_SIZE, CHORUS_LOCAL_RANK, CHORUS_LOCAL_SIZE and CHORUS_STORE
in its environment. With --store file (the default) chorusrun creates a fresh directory
/tmp/chorus-XXXX (CHORUS_STORE=file:///tmp/chorus-XXXX) and removes it at the end; with
--store redis it starts its own redis-server on a free 127.0.0.1 port
(CHORUS_STORE=redis://127.0.0.1:PORT/chorus-XXXX) and stops it at the end; --store-url passes
an existing store through untouched.

With --hosts (or --hostfile: one "host[:slots]" or "host slots=N" per line, # comments), ranks
fill the hosts in order, each up to its slots (1 if not given); -n, if given, may stop short.
Every rank is started through the remote shell, --rsh (default $CHORUS_RSH, else
"ssh -o BatchMode=yes {host}"), which is given one shell command line as its last argument:
"cd <this directory> && exec env <CHORUS_* variables> prog args...". Any command that runs such
a line on a host works, e.g. --rsh "ip netns exec {host} sh -c" for network namespaces. The
ranks meet in a TCP store on the first host, served by rank 0 (CHORUS_STORE=tcp://h1:PORT,
PORT from --store-port, default a random one in 29400-29999), unless --store-url names another.
The variables passed are chorusrun's own CHORUS_* variables and those named with --env; a
CHORUS_AUTH_KEY is refused (the remote command line shows it to every user of the host): give
remote ranks CHORUS_AUTH_KEY_FILE instead.
Every line a rank prints is prefixed with "[rank N] " (stdout to stdout, stderr to stderr).
SIGINT and SIGTERM are forwarded to every rank. When a rank fails (non-zero exit or killed by
a signal) chorusrun names it, stops the others (SIGTERM, then SIGKILL after --grace seconds)
and exits with a code that says which rank failed:

    0        every rank exited 0
    1        chorusrun itself failed (could not start a rank or the redis server)
    2        bad command line
    100+N    rank N failed first (N = 0..22)
    123      a rank numbered 23 or more failed first (the printed line names it)
    124      --timeout expired; every rank was stopped
    128+S    chorusrun was stopped by signal S (130: SIGINT, 143: SIGTERM)
"""

import argparse
import os
import secrets
import selectors
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

EXIT_LAUNCHER_ERROR = 1
EXIT_RANK_BASE = 100
EXIT_RANK_MAX = 123
EXIT_TIMEOUT = 124
POLL_SECONDS = 0.05
OUTPUT_DRAIN_SECONDS = 1.0
# A rank's process group of its own, inside chorusrun's session: a session of its own would
# also put it in a scheduling group of its own where the kernel groups tasks by session
# (autogroup), so that ranks sharing a core each keep a fair share of it and a waiting rank's
# sched_yield gives its core to no other rank.
OWN_PROCESS_GROUP = ({"process_group": 0} if sys.version_info >= (3, 11)
                     else {"preexec_fn": os.setpgrp})


def failed_rank_exit_code(rank):
    return min(EXIT_RANK_BASE + rank, EXIT_RANK_MAX)


def describe_returncode(code):
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "signal %d" % -code
        return "was killed by %s" % name
    return "exited with code %d" % code


def log(message):
    sys.stderr.write("chorusrun: %s\n" % message)
    sys.stderr.flush()


class LauncherError(Exception):
    pass


def free_loopback_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A private redis-server on a free 127.0.0.1 port, stopped by stop()."""

    def __init__(self, binary, start_timeout):
        self.port = free_loopback_port()
        try:
            self.process = subprocess.Popen(
                [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--protected-mode", "yes", "--loglevel", "warning"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                start_new_session=True)
        except OSError as error:
            raise LauncherError("cannot start %s: %s (install redis-server, or use --store file)"
                                % (binary, error))
        deadline = time.monotonic() + start_timeout
        while not self._answers_ping():
            if self.process.poll() is not None:
                message = self.process.stderr.read().decode(errors="replace").strip()
                raise LauncherError("redis-server on port %d exited at start: %s"
                                    % (self.port, message))
            if time.monotonic() > deadline:
                self.stop()
                raise LauncherError("redis-server on port %d did not answer within %.0f s"
                                    % (self.port, start_timeout))
            time.sleep(0.02)

    def _answers_ping(self):
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process.stderr.close()


class PrefixedOutput:
    """Splits one rank's stream into lines and writes each with the rank's prefix."""

    def __init__(self, rank, sink):
        self.prefix = b"[rank %d] " % rank
        self.sink = sink
        self.partial = b""

    def feed(self, data):
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        if lines:
            self.sink.write(b"".join(self.prefix + line + b"\n" for line in lines))
            self.sink.flush()

    def close(self):
        if self.partial:
            self.feed(b"\n")


class RankExit:
    """The selector entry of a rank's pidfd: it becomes readable when the rank exits."""

    def __init__(self, rank):
        self.rank = rank


def parse_hosts(text, source):
    """[(host, slots)] from "h1:4,h2" or hostfile lines ("h1:4", "h1 slots=4", "h1")."""
    hosts = []
    for entry in text:
        entry = entry.split("#", 1)[0].strip()
        if not entry:
            continue
        name, slots = entry, "1"
        if " " in entry:
            name, rest = entry.split(None, 1)
            if not rest.startswith("slots="):
                raise LauncherError("%s: '%s' is not 'host slots=N'" % (source, entry))
            slots = rest[len("slots="):]
        elif entry.count(":") == 1:
            name, slots = entry.split(":")
        if not name or not slots.isdigit() or int(slots) < 1:
            raise LauncherError("%s: '%s' is not host[:slots] with slots >= 1" % (source, entry))
        hosts.append((name, int(slots)))
    if not hosts:
        raise LauncherError("%s names no host" % source)
    return hosts


def place_ranks(hosts, size):
    """[(host, local_rank, local_size)] by rank: hosts filled in order up to their slots."""
    placement = []
    for host, slots in hosts:
        here = min(slots, size - len(placement))
        placement.extend((host, local, here) for local in range(here))
    if len(placement) < size:
        raise LauncherError("-n %d is more than the %d slots of the hosts"
                            % (size, sum(slots for _, slots in hosts)))
    return placement


def remote_command(rsh, host, env, command):
    """The argv that runs `command` with `env` on `host` through the remote shell `rsh`."""
    line = "cd %s && exec env %s %s" % (
        shlex.quote(os.getcwd()),
        " ".join(shlex.quote("%s=%s" % item) for item in sorted(env.items())),
        " ".join(shlex.quote(arg) for arg in command))
    words = shlex.split(rsh)
    if "{host}" in rsh:
        words = [word.replace("{host}", host) for word in words]
    else:
        words.append(host)
    return words + [line]


class Ranks:
    """The rank processes, their output pumps, their exits in the order they happen, and
    their stopping."""

    def __init__(self, command, placement, store_url, rsh=None, forwarded=()):
        self.processes = []
        self.selector = selectors.DefaultSelector()
        self.open_pipes = 0
        self.unreported_exits = 0
        size = len(placement)
        for rank, (host, local_rank, local_size) in enumerate(placement):
            identity = dict(CHORUS_RANK=str(rank), CHORUS_SIZE=str(size),
                            CHORUS_LOCAL_RANK=str(local_rank), CHORUS_LOCAL_SIZE=str(local_size),
                            CHORUS_STORE=store_url)
            if rsh is None:
                argv, env = command, dict(os.environ, **identity)
            else:
                passed = {name: value for name, value in os.environ.items()
                          if name.startswith("CHORUS_") or name in forwarded}
                passed.pop("CHORUS_RSH", None)
                if "CHORUS_AUTH_KEY" in passed:
                    raise LauncherError(
                        "CHORUS_AUTH_KEY would be written on the remote command line, where "
                        "ps shows it to every user of the host; give the ranks "
                        "CHORUS_AUTH_KEY_FILE instead (a file readable by the job's user on "
                        "every host)")
                passed.update(identity)
                argv, env = remote_command(rsh, host, passed, command), None
            try:
                # Each rank leads its own process group, so a signal reaches its children too
                # and a Ctrl-C in the terminal reaches chorusrun only (which forwards it).
                process = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                           **OWN_PROCESS_GROUP)
            except OSError as error:
                self.kill_all()
                raise LauncherError("cannot start rank %d (%s): %s"
                                    % (rank, " ".join(argv), error))
            self.processes.append(process)
            for pipe, sink in ((process.stdout, sys.stdout.buffer),
                               (process.stderr, sys.stderr.buffer)):
                os.set_blocking(pipe.fileno(), False)
                self.selector.register(pipe, selectors.EVENT_READ, PrefixedOutput(rank, sink))
                self.open_pipes += 1
            # Exits are watched, not polled: the selector wakes the moment a rank exits and
            # (epoll keeps its ready list in order) reports exits in the order they happened,
            # so "rank N failed first" names the rank that did, not the lowest-numbered one
            # of those that exited since the last look.
            self.selector.register(os.pidfd_open(process.pid), selectors.EVENT_READ,
                                   RankExit(rank))
            self.unreported_exits += 1

    def pump(self, timeout):
        """Forwards rank output for up to `timeout` s; returns the ranks that exited meanwhile,
        in the order they exited."""
        exited = []
        for key, _ in self.selector.select(timeout):
            if isinstance(key.data, RankExit):
                self.selector.unregister(key.fileobj)
                os.close(key.fileobj)
                self.processes[key.data.rank].wait()
                exited.append(key.data.rank)
                self.unreported_exits -= 1
                continue
            try:
                data = os.read(key.fd, 65536)
            except BlockingIOError:
                continue
            if data:
                key.data.feed(data)
            else:
                key.data.close()
                self.selector.unregister(key.fileobj)
                key.fileobj.close()
                self.open_pipes -= 1
        return exited

    def output_open(self):
        return self.open_pipes > 0

    def signal_running(self, signum):
        for process in self.processes:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signum)
                except ProcessLookupError:
                    pass

    def kill_all(self):
        self.signal_running(signal.SIGKILL)
        for process in self.processes:
            process.wait()

    def running(self):
        return [p for p in self.processes if p.poll() is None]


def run(args):
    store_dir = None
    redis = None
    ranks = None
    received = []
    handlers = {}

    def on_signal(signum, _frame):
        received.append(signum)

    try:
        placement = [("localhost", rank, args.n) for rank in range(args.n)]
        if args.hosts is not None:
            placement = place_ranks(args.hosts, args.n)
        if args.store_url:
            store_url = args.store_url
        elif args.hosts is not None:
            port = args.store_port or 29400 + secrets.randbelow(600)
            host = placement[0][0]
            store_url = "tcp://%s:%d" % ("[%s]" % host if ":" in host else host, port)
        elif args.store == "redis":
            redis = RedisServer(args.redis_server, start_timeout=10)
            store_url = "redis://127.0.0.1:%d/chorus-%s" % (redis.port, secrets.token_hex(4))
        else:
            store_dir = tempfile.mkdtemp(prefix="chorus-", dir=args.store_root)
            store_url = "file://" + store_dir

        for signum in (signal.SIGINT, signal.SIGTERM):
            handlers[signum] = signal.signal(signum, on_signal)
        ranks = Ranks(args.command, placement, store_url,
                      rsh=args.rsh if args.hosts is not None else None, forwarded=args.env)

        deadline = time.monotonic() + args.timeout if args.timeout > 0 else None
        stop_started = None  # when the ranks were told to stop
        exit_code = 0
        forwarded = 0
        all_exited = None  # when the last rank exited
        while ranks.unreported_exits > 0 or ranks.output_open():
            exited = ranks.pump(POLL_SECONDS)
            now = time.monotonic()
            if ranks.unreported_exits == 0:
                # A rank's background child may hold its pipes open; do not wait for it long.
                all_exited = all_exited or now
                if now > all_exited + OUTPUT_DRAIN_SECONDS:
                    break
            if forwarded < len(received):
                for signum in received[forwarded:]:
                    log("forwarding %s to every rank" % signal.Signals(signum).name)
                    ranks.signal_running(signum)
                forwarded = len(received)
                if exit_code == 0:
                    exit_code = 128 + received[0]
                    stop_started = now
            if exit_code == 0:
                for rank in exited:
                    code = ranks.processes[rank].returncode
                    if code != 0:
                        exit_code = failed_rank_exit_code(rank)
                        others = len(ranks.running())
                        hint = ""
                        if code == 255 and args.hosts is not None:
                            hint = (" (255 is also what a remote shell returns when it cannot "
                                    "reach %s: check that the --rsh command works there)"
                                    % placement[rank][0])
                        log("rank %d %s%s; stopping the other %d running rank(s); exit code %d"
                            % (rank, describe_returncode(code), hint, others, exit_code))
                        ranks.signal_running(signal.SIGTERM)
                        stop_started = now
                        break
            if exit_code == 0 and deadline is not None and now > deadline:
                exit_code = EXIT_TIMEOUT
                log("--timeout %g s expired with %d rank(s) running; stopping them; exit code %d"
                    % (args.timeout, len(ranks.running()), exit_code))
                ranks.signal_running(signal.SIGTERM)
                stop_started = now
            if stop_started is not None and now > stop_started + args.grace and ranks.running():
                log("%d rank(s) still running %g s after being told to stop; killing them"
                    % (len(ranks.running()), args.grace))
                ranks.signal_running(signal.SIGKILL)
                stop_started = float("inf")
        return exit_code
    except LauncherError as error:
        log(str(error))
        return EXIT_LAUNCHER_ERROR
    finally:
        if ranks is not None:
            ranks.kill_all()
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        if redis is not None:
            redis.stop()
        if store_dir is not None:
            shutil.rmtree(store_dir, ignore_errors=True)


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="chorusrun", description="Start R ranks of a program on this host or on several.",
        epilog="Exit codes: 0 ok, 1 launcher error, 2 usage, 100+N rank N failed first "
               "(123: rank >= 23), 124 timeout, 128+S stopped by signal S.")
    parser.add_argument("-n", type=int, metavar="R",
                        help="number of ranks (with --hosts: at most the slots; default all)")
    hosts = parser.add_mutually_exclusive_group()
    hosts.add_argument("--hosts", metavar="H[:S],...",
                       help="start ranks on these hosts, S slots each (default 1)")
    hosts.add_argument("--hostfile", metavar="FILE",
                       help="hosts one per line: host[:slots] or host slots=N")
    parser.add_argument("--rsh", default=os.environ.get("CHORUS_RSH",
                                                        "ssh -o BatchMode=yes {host}"),
                        help="remote shell for --hosts; {host} is replaced, and the command line "
                             "to run is its last argument (default: $CHORUS_RSH, else ssh)")
    parser.add_argument("--store-port", type=int, default=0,
                        help="port of the TCP store rank 0 serves with --hosts (default: random "
                             "in 29400-29999)")
    parser.add_argument("--env", action="append", default=[], metavar="NAME",
                        help="with --hosts, also pass this variable to the ranks (repeatable; "
                             "CHORUS_* variables are always passed)")
    parser.add_argument("--store", choices=("file", "redis"), default="file",
                        help="rendezvous store chorusrun creates (default: file)")
    parser.add_argument("--store-url", help="use this existing store instead "
                        "(file:///dir or redis://host:port/prefix)")
    parser.add_argument("--store-root", default=None,
                        help="where the file store directory is created (default: $TMPDIR or /tmp)")
    parser.add_argument("--redis-server", default="redis-server",
                        help="redis-server binary for --store redis")
    parser.add_argument("--timeout", type=float, default=0,
                        help="stop every rank after this many seconds (default: no limit)")
    parser.add_argument("--grace", type=float, default=3,
                        help="seconds between SIGTERM and SIGKILL when stopping ranks")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="program and its arguments")
    args = parser.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        parser.error("no program to run")
    try:
        if args.hostfile is not None:
            with open(args.hostfile) as f:
                args.hosts = parse_hosts(f.read().splitlines(), args.hostfile)
        elif args.hosts is not None:
            args.hosts = parse_hosts(args.hosts.split(","), "--hosts")
    except (OSError, LauncherError) as error:
        parser.error(str(error))
    if args.n is None:
        if args.hosts is None:
            parser.error("-n is required without --hosts or --hostfile")
        args.n = sum(slots for _, slots in args.hosts)
    if args.n < 1:
        parser.error("-n must be at least 1")
    return args


def main(argv=None):
    return run(parse_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
