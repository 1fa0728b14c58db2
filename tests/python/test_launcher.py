"""commux.launcher: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and
MASTER_PORT from the variables of mpirun (Open MPI, MPICH/Hydra), PMIx and srun; and a job
started by Open MPI's mpirun with none of them set by hand."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from harness import free_port, run_python

from commux import launcher
from commux.launcher import (LauncherError, detect, expand_hostlist, expand_tasks_per_node,
                             launcher_environment)

HERE = os.path.dirname(os.path.abspath(__file__))


def ompi(rank, size, local_rank, local_size, **extra):
    env = {
        "OMPI_COMM_WORLD_RANK": str(rank),
        "OMPI_COMM_WORLD_SIZE": str(size),
        "OMPI_COMM_WORLD_LOCAL_RANK": str(local_rank),
        "OMPI_COMM_WORLD_LOCAL_SIZE": str(local_size),
        "OMPI_MCA_ess_base_jobid": "2078605313",
        "PMIX_NAMESPACE": "2078605313",
        "PMIX_RANK": str(rank),
    }
    env.update(extra)
    return env


def slurm(procid, ntasks, localid, nodelist, tasks_per_node, nnodes, job="4242", step="0", **extra):
    env = {
        "SLURM_JOB_ID": job,
        "SLURM_STEP_ID": step,
        "SLURM_PROCID": str(procid),
        "SLURM_STEP_NUM_TASKS": str(ntasks),
        "SLURM_NTASKS": str(ntasks),
        "SLURM_LOCALID": str(localid),
        "SLURM_STEP_NODELIST": nodelist,
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_STEP_TASKS_PER_NODE": tasks_per_node,
        "SLURM_STEP_NUM_NODES": str(nnodes),
    }
    env.update(extra)
    return env


def in_range(port: str) -> bool:
    return 20000 <= int(port) < 32000


# ---------------------------------------------------------------------------------------
# Slurm's compressed lists
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, hosts", [
    ("n[1-3]", ["n1", "n2", "n3"]),
    ("a[01-02,05],b7", ["a01", "a02", "a05", "b7"]),
    ("host1,host2", ["host1", "host2"]),
    ("node17", ["node17"]),
    ("node[01-04,07],gpu-a[1-2]", ["node01", "node02", "node03", "node04", "node07", "gpu-a1", "gpu-a2"]),
    ("c[08-10]", ["c08", "c09", "c10"]),
    ("c[8-10]", ["c8", "c9", "c10"]),
    ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
    ("x[3],y", ["x3", "y"]),
])
def test_expand_hostlist(text, hosts):
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("text", ["n[1-3", "n1-3]", "n[3-1]", "n[a-b]"])
def test_expand_hostlist_rejects_malformed(text):
    with pytest.raises(ValueError):
        expand_hostlist(text)


def test_expand_tasks_per_node():
    assert expand_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert expand_tasks_per_node("4") == [4]
    with pytest.raises(ValueError):
        expand_tasks_per_node("2(3)")


# ---------------------------------------------------------------------------------------
# Open MPI
# ---------------------------------------------------------------------------------------


def test_open_mpi_one_host():
    values = launcher_environment(ompi(2, 4, 2, 4))
    assert values.pop("MASTER_PORT") == launcher_environment(ompi(0, 4, 0, 4))["MASTER_PORT"]
    assert values == {"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "4",
                      "MASTER_ADDR": "127.0.0.1"}
    assert detect(ompi(2, 4, 2, 4)).launcher == "Open MPI"


def test_open_mpi_port_comes_from_the_job_id():
    a = launcher_environment(ompi(0, 2, 0, 2))["MASTER_PORT"]
    b = launcher_environment(ompi(0, 2, 0, 2, PMIX_NAMESPACE="2078670849"))["MASTER_PORT"]
    # Open MPI 5 (PRRTE) names its namespaces; without PMIx the ORTE job id serves.
    c = launcher_environment(ompi(0, 2, 0, 2, PMIX_NAMESPACE="prterun-vm-5915@1"))["MASTER_PORT"]
    env = ompi(0, 2, 0, 2)
    del env["PMIX_NAMESPACE"]
    d = launcher_environment(env)["MASTER_PORT"]
    assert len({a, b, c}) == 3 and d == a
    assert all(in_range(p) for p in (a, b, c, d))


def test_open_mpi_on_several_hosts_without_master_addr_is_a_clear_error():
    env = ompi(5, 8, 1, 4)
    launch = detect(env)
    assert launch.missing == ("MASTER_ADDR",)
    assert "MASTER_ADDR" not in launch.values
    # What can be derived still is (LOCAL_RANK for the device, the port).
    assert launch.values["RANK"] == "5" and launch.values["LOCAL_RANK"] == "1"
    assert in_range(launch.values["MASTER_PORT"])
    with pytest.raises(LauncherError, match=r"several hosts.*set MASTER_ADDR.*mpirun -x MASTER_ADDR="):
        launcher_environment(env)
    assert issubclass(LauncherError, ValueError)


def test_open_mpi_on_several_hosts_with_master_addr():
    values = launcher_environment(ompi(5, 8, 1, 4, MASTER_ADDR="node01"))
    assert "MASTER_ADDR" not in values
    assert values["RANK"] == "5" and values["LOCAL_WORLD_SIZE"] == "4"


def test_open_mpi_num_nodes_when_local_size_is_missing():
    env = ompi(1, 2, 1, 2, OMPI_MCA_orte_num_nodes="1")
    del env["OMPI_COMM_WORLD_LOCAL_SIZE"]
    assert launcher_environment(env)["MASTER_ADDR"] == "127.0.0.1"
    env["OMPI_MCA_orte_num_nodes"] = "2"
    assert detect(env).missing == ("MASTER_ADDR",)


def test_explicit_settings_win():
    env = ompi(1, 2, 1, 2, MASTER_PORT="12345", MASTER_ADDR="10.0.0.1", LOCAL_RANK="0")
    values = launcher_environment(env)
    assert values == {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}
    # An empty variable counts as unset.
    assert launcher_environment(ompi(1, 2, 1, 2, MASTER_ADDR=""))["MASTER_ADDR"] == "127.0.0.1"
    # One of RANK / WORLD_SIZE given: the other is filled in.
    assert launcher_environment(ompi(1, 2, 1, 2, WORLD_SIZE="2"))["RANK"] == "1"


def test_open_mpi_wins_over_the_slurm_allocation_it_runs_in():
    # mpirun inside an sbatch script: the ranks inherit the allocation's (and orted's srun
    # step's) Slurm variables, which describe the daemons, not the ranks.
    env = ompi(3, 4, 1, 2, **slurm(0, 2, 0, "n[1-2]", "1(x2)", 2))
    launch = detect(env)
    assert launch.launcher == "Open MPI" and launch.values["RANK"] == "3"
    assert launch.missing == ("MASTER_ADDR",)


# ---------------------------------------------------------------------------------------
# Nothing to do
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("extra", [
    {"TORCHELASTIC_RUN_ID": "abc"},
    {"TORCHELASTIC_RESTART_COUNT": "0"},
    {"RANK": "0", "WORLD_SIZE": "2"},
    {"COMMUX_LAUNCHER": "0"},
    {"COMMUX_LAUNCHER": "off"},
])
def test_torchrun_or_opt_out_means_nothing(extra):
    for env in (ompi(5, 8, 1, 4), slurm(1, 2, 1, "n1", "2", 1)):
        assert detect({**env, **extra}) == launcher.Launch()
        assert launcher_environment({**env, **extra}) == {}


def test_no_launcher_means_nothing():
    assert launcher_environment({}) == {}
    assert launcher_environment({"HOME": "/root", "PATH": "/bin", "MASTER_PORT": "1"}) == {}
    # A Slurm batch script (no step id) or salloc's shell is not a launch of ranks.
    batch = slurm(0, 4, 0, "n[1-2]", "2(x2)", 2)
    del batch["SLURM_STEP_ID"]
    assert launcher_environment(batch) == {}
    assert launcher_environment({**batch, "SLURM_STEP_ID": "4294967290"}) == {}


def test_malformed_launcher_variables_raise():
    with pytest.raises(LauncherError, match="OMPI_COMM_WORLD_RANK"):
        detect(ompi("x", 2, 0, 2))
    with pytest.raises(LauncherError, match="rank 4 of a job of 4"):
        detect(ompi(4, 4, 0, 4))
    with pytest.raises(LauncherError, match="host list"):
        detect(slurm(0, 2, 0, "n[1-2", "1(x2)", 2))


# ---------------------------------------------------------------------------------------
# MPICH / Hydra (PMI) and PMIx
# ---------------------------------------------------------------------------------------


def hydra(rank, size, local_rank, local_size, **extra):
    env = {"PMI_RANK": str(rank), "PMI_SIZE": str(size), "PMI_FD": "6",
           "MPI_LOCALRANKID": str(local_rank), "MPI_LOCALNRANKS": str(local_size)}
    env.update(extra)
    return env


def test_hydra_one_host():
    values = launcher_environment(hydra(1, 3, 1, 3))
    assert values == {"RANK": "1", "WORLD_SIZE": "3", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "3",
                      "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    assert detect(hydra(1, 3, 1, 3)).launcher.startswith("MPICH/Hydra")


def test_hydra_port_from_a_job_id():
    in_slurm = launcher_environment(hydra(1, 3, 1, 3, SLURM_JOB_ID="77", SLURM_STEP_ID="0"))["MASTER_PORT"]
    in_pbs = launcher_environment(hydra(1, 3, 1, 3, PBS_JOBID="123.pbs01"))["MASTER_PORT"]
    pmi2 = launcher_environment(hydra(1, 3, 1, 3, PMI_JOBID="88"))["MASTER_PORT"]
    assert len({in_slurm, in_pbs, pmi2, "29500"}) == 4
    assert all(in_range(p) for p in (in_slurm, in_pbs, pmi2))


def test_hydra_on_several_hosts():
    env = hydra(4, 8, 0, 4)
    with pytest.raises(LauncherError, match=r"MPICH/Hydra.*set MASTER_ADDR.*mpiexec -genv MASTER_ADDR"):
        launcher_environment(env)
    assert launcher_environment({**env, "MASTER_ADDR": "h0"})["RANK"] == "4"


def test_hydra_inside_a_slurm_step_is_hydra():
    # mpiexec.hydra bootstraps its proxies through srun: the ranks see the proxy step's
    # SLURM_PROCID (the node) and SLURM_STEP_NUM_TASKS (the node count).
    env = hydra(5, 8, 1, 4, **slurm(1, 2, 0, "n[1-2]", "1(x2)", 2))
    launch = detect(env)
    assert launch.launcher.startswith("MPICH/Hydra")
    assert launch.values["RANK"] == "5" and launch.values["WORLD_SIZE"] == "8"
    # Rank 0 of that job agrees with SLURM_PROCID 0 on its rank, not on the size.
    env0 = hydra(0, 8, 0, 4, **slurm(0, 2, 0, "n[1-2]", "1(x2)", 2))
    assert detect(env0).launcher.startswith("MPICH/Hydra")


def test_pmix_alone_gives_the_rank_and_asks_for_the_size():
    launch = detect({"PMIX_RANK": "3", "PMIX_NAMESPACE": "prterun-vm-1@1"})
    assert launch.launcher == "PMIx"
    assert launch.values["RANK"] == "3" and in_range(launch.values["MASTER_PORT"])
    assert "WORLD_SIZE" in launch.missing and "set WORLD_SIZE" in launch.error
    # Once WORLD_SIZE is given, only MASTER_ADDR is left to ask for.
    launch = detect({"PMIX_RANK": "3", "PMIX_NAMESPACE": "prterun-vm-1@1", "WORLD_SIZE": "4"})
    assert launch.values["RANK"] == "3" and launch.missing == ("MASTER_ADDR",)


# ---------------------------------------------------------------------------------------
# Slurm
# ---------------------------------------------------------------------------------------


def test_slurm_two_nodes():
    env = slurm(3, 4, 1, "node[01-02]", "2(x2)", 2, SLURM_NODEID="1")
    values = launcher_environment(env)
    assert values.pop("MASTER_PORT") == str(20000 + (4242 * 17) % 12000)
    assert values == {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                      "MASTER_ADDR": "node01"}
    assert detect(env).launcher == "Slurm"


def test_slurm_master_is_the_first_host_of_the_step():
    env = slurm(0, 7, 0, "gpu-a[2-3],node[01-04,07]", "1(x7)", 7,
                SLURM_JOB_NODELIST="gpu-a[1-3],node[01-08]")
    assert launcher_environment(env)["MASTER_ADDR"] == "gpu-a2"


def test_slurm_one_node_is_loopback():
    values = launcher_environment(slurm(1, 2, 1, "node07", "2", 1))
    assert values["MASTER_ADDR"] == "127.0.0.1" and values["LOCAL_WORLD_SIZE"] == "2"


def test_slurm_uneven_tasks_per_node():
    base = dict(nodelist="a[1-2],b7", tasks_per_node="2(x2),1", nnodes=3)
    on_b7 = launcher_environment(slurm(4, 5, 0, SLURMD_NODENAME="b7", **base))
    on_a1 = launcher_environment(slurm(1, 5, 1, SLURMD_NODENAME="a1", **base))
    by_nodeid = launcher_environment(slurm(4, 5, 0, SLURM_NODEID="2", **base))
    assert on_b7["LOCAL_WORLD_SIZE"] == "1" and on_a1["LOCAL_WORLD_SIZE"] == "2"
    assert by_nodeid["LOCAL_WORLD_SIZE"] == "1"
    assert on_b7["MASTER_ADDR"] == on_a1["MASTER_ADDR"] == "a1"


def test_slurm_without_step_variables_falls_back():
    env = {"SLURM_JOB_ID": "9", "SLURM_STEP_ID": "2", "SLURM_PROCID": "1", "SLURM_NTASKS": "2",
           "SLURM_LOCALID": "0", "SLURM_NTASKS_PER_NODE": "1", "SLURM_JOB_NODELIST": "h[1-2]"}
    values = launcher_environment(env)
    assert values["WORLD_SIZE"] == "2" and values["LOCAL_WORLD_SIZE"] == "1"
    assert values["MASTER_ADDR"] == "h1"


def test_slurm_ports_differ_between_jobs_and_steps():
    def port(job, step):
        env = slurm(0, 2, 0, "n[1-2]", "1(x2)", 2, job=str(job), step=str(step))
        return launcher_environment(env)["MASTER_PORT"]

    ports = {port(job, step) for job in range(1000, 1300) for step in range(4)}
    assert len(ports) == 1200 and all(in_range(p) for p in ports)


def test_slurm_with_pmix_agreeing_is_slurm():
    env = slurm(1, 2, 1, "n[1-2]", "1(x2)", 2, PMIX_RANK="1", PMIX_NAMESPACE="slurm.pmix.4242.0")
    assert detect(env).launcher == "Slurm"
    assert launcher_environment(env)["MASTER_ADDR"] == "n1"


# ---------------------------------------------------------------------------------------
# apply() and the error at init_process_group
# ---------------------------------------------------------------------------------------


def test_apply_sets_only_unset_variables():
    environ = ompi(1, 2, 1, 2, MASTER_PORT="23456")
    before = dict(environ)
    launch = launcher.apply(environ, install_check=False)
    assert launch.launcher == "Open MPI"
    assert environ == {**before, "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1",
                       "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}
    # A second application (a child process inheriting them) changes nothing.
    assert launcher.apply(environ, install_check=False).values == {}


_CLEAN = {name: None for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                  "MASTER_ADDR", "MASTER_PORT", "COMMUX_LAUNCHER")}


def _launcher_free_env():
    """A run_python env that removes every launcher / torchrun variable of this process."""
    env = dict(_CLEAN)
    for name in os.environ:
        if name.startswith(("TORCHELASTIC_", "OMPI_", "PMI_", "PMIX_", "SLURM_", "MPI_LOCAL")):
            env[name] = None
    return env


def _print_environ_change():
    """Python source: prints what changed in os.environ since ``before`` (a line
    ``CHANGED {...}``, empty when nothing did)."""
    return ("changed = {k: os.environ.get(k) for k in set(before) | set(os.environ)\n"
            "           if before.get(k) != os.environ.get(k)}\n"
            "print('CHANGED', changed)\n")


_LAUNCHES = {
    "open-mpi-one-host": ompi(0, 1, 0, 1),
    "open-mpi-several-hosts": ompi(5, 8, 1, 4),
    "slurm-two-nodes": slurm(3, 4, 1, "node[01-02]", "2(x2)", 2, SLURM_NODEID="1"),
    "slurm-one-node": slurm(0, 1, 0, "node07", "1", 1),
    "hydra": hydra(1, 3, 1, 3),
    "pmix": {"PMIX_RANK": "3", "PMIX_NAMESPACE": "prterun-vm-1@1"},
}


@pytest.mark.parametrize("name", sorted(_LAUNCHES))
def test_import_changes_nothing_in_the_environment(name):
    """Importing torch (whose autoload loads and registers commux), commux and
    commux.launcher, and registering, leave os.environ as it was under any launcher:
    programs that use another backend, or none, must not see RANK or WORLD_SIZE appear
    because commux is installed."""
    code = (
        "import os\n"
        "before = dict(os.environ)\n"
        "import torch, torch.distributed as dist\n"
        "assert 'ucx' in dist.Backend.backend_list, 'torch did not autoload commux'\n"
        "import commux, commux.launcher\n"
        "commux.register()\n"
        + _print_environ_change()
    )
    env = {**_launcher_free_env(), **_LAUNCHES[name], "TORCH_DEVICE_BACKEND_AUTOLOAD": "1"}
    proc = run_python(code, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "CHANGED {}" in proc.stdout, proc.stdout + proc.stderr
    assert "commux" not in proc.stderr, proc.stderr  # no warning either


def test_other_backends_and_rendezvous_are_not_affected():
    """Under mpirun's variables (one rank, one host: enough for commux to fill everything),
    gloo's env:// rendezvous sees torch's environment as without commux (torch's own error
    that RANK is missing), a direct env:// rendezvous too, and a gloo group made with
    tcp:// works and leaves os.environ alone."""
    code = (
        "import os\n"
        "before = dict(os.environ)\n"
        "import torch, torch.distributed as dist\n"
        "from torch.distributed.rendezvous import rendezvous\n"
        "assert 'ucx' in dist.Backend.backend_list, 'torch did not autoload commux'\n"
        "for what, call in (('gloo', lambda: dist.init_process_group('gloo')),\n"
        "                   ('direct', lambda: next(rendezvous('env://')))):\n"
        "    try:\n"
        "        call()\n"
        "        print('NO ERROR', what)\n"
        "    except ValueError as e:\n"
        "        print('ERROR', what, type(e).__name__, e)\n"
        "dist.init_process_group('gloo', init_method='tcp://127.0.0.1:%d' % int(os.environ['PORT']),\n"
        "                        rank=0, world_size=1)\n"
        "t = torch.ones(2)\n"
        "dist.all_reduce(t)\n"
        "print('GLOO', dist.get_backend(), t.tolist())\n"
        "dist.destroy_process_group()\n"
        + _print_environ_change()
    )
    env = {**_launcher_free_env(), **ompi(0, 1, 0, 1), "TORCH_DEVICE_BACKEND_AUTOLOAD": "1",
           "PORT": str(free_port())}
    proc = run_python(code, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    for what in ("gloo", "direct"):
        assert f"ERROR {what} ValueError" in proc.stdout, out
        assert "environment variable RANK expected" in proc.stdout, out
    assert "LauncherError" not in proc.stdout, out
    assert "GLOO gloo [1.0, 1.0]" in proc.stdout, out
    assert "CHANGED {}" in proc.stdout, out


@pytest.mark.ucx_only
@pytest.mark.parametrize("backend", ["ucx", "commux", "cpu:ucx"])
def test_a_ucx_group_fills_the_variables_at_its_rendezvous(backend):
    """The same environment: init_process_group of a commux group through env:// fills
    RANK, WORLD_SIZE, LOCAL_*, MASTER_* from the launcher's variables at its rendezvous
    (not before), and they stay set as torchrun's would be."""
    code = (
        "import os, sys\n"
        "import torch, torch.distributed as dist\n"
        "assert 'RANK' not in os.environ and 'LOCAL_RANK' not in os.environ\n"
        "dist.init_process_group(sys.argv[1])\n"
        "t = torch.ones(2)\n"
        "dist.all_reduce(t)\n"
        "print('OK', dist.get_rank(), dist.get_world_size(), t.tolist())\n"
        "print('ENV', *(os.environ.get(n) for n in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK',\n"
        "                                            'LOCAL_WORLD_SIZE', 'MASTER_ADDR')))\n"
        "print('PORT', os.environ.get('MASTER_PORT'))\n"
        "dist.destroy_process_group()\n"
    )
    env = {**_launcher_free_env(), **ompi(0, 1, 0, 1, PMIX_NAMESPACE=f"one-{os.getpid()}-{backend}"),
           "TORCH_DEVICE_BACKEND_AUTOLOAD": "1"}
    proc = run_python(code, env=env, args=(backend,))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "OK 0 1 [1.0, 1.0]" in proc.stdout, out
    assert "ENV 0 1 0 1 127.0.0.1" in proc.stdout, out
    port = proc.stdout.split("PORT ")[1].split()[0]
    assert in_range(port), out


def test_missing_master_addr_fails_at_init_not_at_import():
    """On several hosts without MASTER_ADDR importing stays quiet, a gloo group gets torch's
    own error (commux does not speak for other backends), and a ucx group's
    init_process_group raises the clear LauncherError (no store is created, nothing
    waits)."""
    code = (
        "import os\n"
        "import torch, torch.distributed as dist\n"
        "print('LOCAL_RANK', os.environ.get('LOCAL_RANK'), 'MASTER_ADDR', os.environ.get('MASTER_ADDR'))\n"
        "for backend in ('gloo', 'ucx'):\n"
        "    try:\n"
        "        dist.init_process_group(backend)\n"
        "    except ValueError as e:\n"
        "        print('ERROR', backend, type(e).__name__, e)\n"
        "print('AFTER LOCAL_RANK', os.environ.get('LOCAL_RANK'))\n"
    )
    env = {**_launcher_free_env(), **ompi(1, 4, 1, 2), "TORCH_DEVICE_BACKEND_AUTOLOAD": "1"}
    proc = run_python(code, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "LOCAL_RANK None MASTER_ADDR None" in proc.stdout, out
    assert "ERROR gloo ValueError" in proc.stdout and "variable RANK expected" in proc.stdout, out
    assert "ERROR ucx LauncherError" in proc.stdout and "set MASTER_ADDR" in proc.stdout, out
    # What could be derived was, at the ucx group's rendezvous.
    assert "AFTER LOCAL_RANK 1" in proc.stdout, out
    assert "commux" not in proc.stderr, proc.stderr  # no warning at import


def test_explicit_apply_gives_local_rank_before_init():
    """commux.launcher.apply() is the explicit way to have the variables (LOCAL_RANK for a
    device) before init_process_group."""
    code = (
        "import os\n"
        "import torch, commux.launcher\n"
        "print('BEFORE', os.environ.get('LOCAL_RANK'))\n"
        "launch = commux.launcher.apply()\n"
        "print('AFTER', launch.launcher, os.environ.get('RANK'), os.environ.get('LOCAL_RANK'))\n"
    )
    env = {**_launcher_free_env(), **slurm(3, 4, 1, "node[01-02]", "2(x2)", 2, SLURM_NODEID="1")}
    proc = run_python(code, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "BEFORE None" in proc.stdout and "AFTER Slurm 3 1" in proc.stdout, out


def test_the_backend_check_reads_init_process_group():
    assert launcher._names_commux("ucx") and launcher._names_commux("commux")
    assert launcher._names_commux("cpu:ucx,cuda:nccl") and launcher._names_commux("cpu:gloo,cuda:commux")
    assert not launcher._names_commux("gloo") and not launcher._names_commux("cpu:gloo,cuda:nccl")
    assert not launcher._names_commux(None) and not launcher._names_commux("undefined")


# ---------------------------------------------------------------------------------------
# mpirun end to end
# ---------------------------------------------------------------------------------------

MPIRUN_TIMEOUT_S = 180
_JOB_MODES = [pytest.param((), id="at-rendezvous"), pytest.param(("--apply",), id="explicit-apply")]


def _job_env():
    """This process's environment without any launcher, torchrun or UCX variable."""
    stripped = ("TORCHELASTIC_", "UCX_", "OMPI_", "PMI_", "PMIX_", "SLURM_", "MPI_LOCAL")
    env = {name: value for name, value in os.environ.items()
           if name not in _CLEAN and not name.startswith(stripped)}
    env["OMP_NUM_THREADS"] = "1"
    return env


@pytest.mark.ucx_only
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun (Open MPI) is not installed")
@pytest.mark.timeout(MPIRUN_TIMEOUT_S + 30)
@pytest.mark.parametrize("job_args", _JOB_MODES)
def test_mpirun_without_torchrun_variables(job_args):
    version = subprocess.run(["mpirun", "--version"], capture_output=True, text=True, timeout=30)
    if "Open MPI" not in version.stdout + version.stderr:
        pytest.skip(f"mpirun is not Open MPI's: {version.stdout.strip()[:80]}")
    env = _job_env()
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "4",
           sys.executable, os.path.join(HERE, "mpirun_job.py"), *job_args]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=MPIRUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # mpirun takes its ranks down with it
        try:
            out, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        pytest.fail(f"mpirun did not finish in {MPIRUN_TIMEOUT_S} s:\n{out[-6000:]}")
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, f"mpirun exited {proc.returncode} after {elapsed:.1f} s:\n{out[-6000:]}"
    for rank in range(4):
        assert f"mpirun ok rank {rank}" in out, out[-6000:]
    print(f"mpirun -np 4 job: {elapsed:.1f} s")


STAND_IN_RANKS = 2
STAND_IN_TIMEOUT_S = 120


def _free_job_namespace() -> str:
    """An Open MPI 5 style namespace whose derived MASTER_PORT is free now."""
    import socket

    for attempt in range(100):
        namespace = f"prterun-test-{os.getpid()}@{attempt}"
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", launcher.port_for_job(namespace)))
            except OSError:
                continue
        return namespace
    pytest.fail("no free port among 100 job namespaces")


@pytest.mark.ucx_only
@pytest.mark.timeout(STAND_IN_TIMEOUT_S + 30)
@pytest.mark.parametrize("job_args", _JOB_MODES)
def test_job_under_mpirun_variables(job_args):
    """mpirun_job.py in ranks started the way Open MPI's mpirun starts them (its variables,
    nothing else), for machines without Open MPI: nothing is set at import, a ucx group's
    env:// init works from the launcher's variables alone."""
    namespace = _free_job_namespace()
    procs = []
    for rank in range(STAND_IN_RANKS):
        env = {**_job_env(), **ompi(rank, STAND_IN_RANKS, rank, STAND_IN_RANKS,
                                    PMIX_NAMESPACE=namespace, OMPI_MCA_ess_base_jobid=namespace),
               "TORCH_DEVICE_BACKEND_AUTOLOAD": "1"}
        procs.append(subprocess.Popen(
            [sys.executable, os.path.join(HERE, "mpirun_job.py"), *job_args], env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True))
    deadline = time.monotonic() + STAND_IN_TIMEOUT_S
    outs = []
    try:
        for proc in procs:
            try:
                out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pytest.fail(f"the stand-in job did not finish in {STAND_IN_TIMEOUT_S} s")
            outs.append(out)
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
    report = "\n".join(f"--- rank {r} (exit {p.returncode}) ---\n{o[-4000:]}"
                       for r, (p, o) in enumerate(zip(procs, outs)))
    for rank, proc in enumerate(procs):
        assert proc.returncode == 0, report
        assert f"mpirun ok rank {rank}" in outs[rank], report
