#!/usr/bin/env python3
"""Backend CPU per memopt.get call, two memopt builds side by side.

Usage (as root; each PostgreSQL copy with its own memopt.so installed, as
docs/memopt-fuzz.md's "Which memopt?" makes one):

    extension/memopt/bench/get_cpu.py A_BINDIR B_BINDIR [ROUNDS]
    extension/memopt/bench/get_cpu.py --forms BINDIR [ROUNDS]

Starts a scratch cluster on each (run as the postgres user), loads t4 (100,000 bigint keys,
enabled and read once so that every later lookup hits), then runs ROUNDS interleaved rounds
(default 8; the order alternates each round) of a PL/pgSQL loop of 1,000,000
`r := memopt.get('t4', k)` calls, and prints each build's median backend CPU (user + system
from /proc) per call. CPU time, not wall time: on a shared machine other work moves the wall
clock far more than the backend's own time.

With --forms, one build (memopt 1.1) and one cluster: A is the two-argument
`memopt.get('t4', k)`, B the three-argument `memopt.get('t4', k, layout)` that checks the
caller's layout of the columns (the form the client calls), in the same interleaved rounds.
"""
import os
import shutil
import subprocess
import sys
import tempfile

CALLS = 1_000_000
SETUP = """
CREATE EXTENSION memopt;
CREATE TABLE t4 (key bigint PRIMARY KEY, value text);
INSERT INTO t4 SELECT g, 'v' || g FROM generate_series(1, 100000) g;
SELECT memopt.enable_read('t4');
CREATE FUNCTION loop_get(n int) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE r record; s bigint := 0;
BEGIN
  FOR i IN 1..n LOOP r := memopt.get('t4', (i % 100000) + 1); s := s + 1; END LOOP;
  RETURN s;
END $$;
SELECT loop_get(200000);
"""
CHECKED = """
CREATE FUNCTION loop_get_checked(n int) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE r record; s bigint := 0; l bigint := (SELECT layout FROM memopt.columns('t4') LIMIT 1);
BEGIN
  FOR i IN 1..n LOOP r := memopt.get('t4', (i % 100000) + 1, l); s := s + 1; END LOOP;
  RETURN s;
END $$;
SELECT loop_get_checked(200000);
"""


def as_postgres(*args):
    subprocess.run(["runuser", "-u", "postgres", "--", *args], check=True,
                   stdout=subprocess.DEVNULL)


def start(bindir, port, extra=""):
    root = tempfile.mkdtemp(prefix="memopt-get-cpu-")
    shutil.chown(root, "postgres", "postgres")
    as_postgres(f"{bindir}/initdb", "-D", f"{root}/data", "-A", "trust")
    as_postgres(f"{bindir}/pg_ctl", "-D", f"{root}/data", "-w", "-l", f"{root}/log", "-o",
                f"-p {port} -k {root} -c listen_addresses='' -c shared_preload_libraries=memopt",
                "start")
    subprocess.run(["psql", "-h", root, "-p", str(port), "-U", "postgres", "-q", "-X"],
                   input=SETUP + extra, text=True, check=True, stdout=subprocess.DEVNULL)
    return root


def cpu_per_call(root, port, function="loop_get"):
    p = subprocess.Popen(["psql", "-h", root, "-p", str(port), "-U", "postgres", "-AtqX"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(sql):
        p.stdin.write(sql + "\n")
        p.stdin.flush()
        return p.stdout.readline().strip()

    pid = int(ask("SELECT pg_backend_pid();"))

    def cpu():
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    ask(f"SELECT {function}(100000);")  # the plan cached, the session warm
    before = cpu()
    ask(f"SELECT {function}({CALLS});")
    after = cpu()
    p.stdin.close()
    p.wait()
    return (after - before) / CALLS * 1e6


def median(t):
    t = sorted(t)
    return (t[(len(t) - 1) // 2] + t[len(t) // 2]) / 2


def forms(bindir, rounds):
    root = start(bindir, 54881, CHECKED)
    try:
        runs = [("A two-argument get", "loop_get"), ("B three-argument get", "loop_get_checked")]
        times = {name: [] for name, _ in runs}
        for i in range(rounds):
            for name, function in runs if i % 2 == 0 else runs[::-1]:
                times[name].append(cpu_per_call(root, 54881, function))
        for name, _ in runs:
            print(f"{name}: median {median(times[name]):.3f} us of backend CPU per call; rounds "
                  + " ".join(f"{x:.2f}" for x in times[name]))
    finally:
        as_postgres(f"{bindir}/pg_ctl", "-D", f"{root}/data", "-m", "fast", "stop")
        shutil.rmtree(root)


def main():
    if sys.argv[1] == "--forms":
        forms(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 8)
        return
    a, b = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    builds = [("A", a, 54881), ("B", b, 54882)]
    roots = {name: start(bindir, port) for name, bindir, port in builds}
    try:
        times = {name: [] for name, _, _ in builds}
        for i in range(rounds):
            for name, _, port in builds if i % 2 == 0 else builds[::-1]:
                times[name].append(cpu_per_call(roots[name], port))
        for name, bindir, _ in builds:
            print(f"{name} ({bindir}): median {median(times[name]):.3f} us of backend CPU per call; rounds "
                  + " ".join(f"{x:.2f}" for x in times[name]))
    finally:
        for name, bindir, _ in builds:
            as_postgres(f"{bindir}/pg_ctl", "-D", f"{roots[name]}/data", "-m", "fast", "stop")
            shutil.rmtree(roots[name])


if __name__ == "__main__":
    main()
