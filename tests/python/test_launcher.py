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

from harness import run_python

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


def test_missing_master_addr_fails_at_init_not_at_import():
    """torch's autoload applies the launcher's variables at `import torch`; on several hosts
    without MASTER_ADDR importing stays quiet, and init_process_group raises the clear
    LauncherError (no store is created, nothing waits)."""
    code = (
        "import os\n"
        "import torch, torch.distributed as dist\n"
        "print('LOCAL_RANK', os.environ.get('LOCAL_RANK'), 'MASTER_ADDR', os.environ.get('MASTER_ADDR'))\n"
        "try:\n"
        "    dist.init_process_group('ucx')\n"
        "except ValueError as e:\n"
        "    print('ERROR', type(e).__name__, e)\n"
    )
    env = {**_launcher_free_env(), **ompi(1, 4, 1, 2), "TORCH_DEVICE_BACKEND_AUTOLOAD": "1"}
    proc = run_python(code, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "LOCAL_RANK 1 MASTER_ADDR None" in proc.stdout, proc.stdout + proc.stderr
    assert "ERROR LauncherError" in proc.stdout and "set MASTER_ADDR" in proc.stdout, proc.stdout
    assert "commux" not in proc.stderr, proc.stderr  # no warning at import


# ---------------------------------------------------------------------------------------
# mpirun end to end
# ---------------------------------------------------------------------------------------

MPIRUN_TIMEOUT_S = 180


@pytest.mark.ucx_only
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun (Open MPI) is not installed")
@pytest.mark.timeout(MPIRUN_TIMEOUT_S + 30)
def test_mpirun_without_torchrun_variables():
    version = subprocess.run(["mpirun", "--version"], capture_output=True, text=True, timeout=30)
    if "Open MPI" not in version.stdout + version.stderr:
        pytest.skip(f"mpirun is not Open MPI's: {version.stdout.strip()[:80]}")
    stripped = ("TORCHELASTIC_", "UCX_", "OMPI_", "PMI_", "PMIX_", "SLURM_", "MPI_LOCAL")
    env = {name: value for name, value in os.environ.items()
           if name not in _CLEAN and not name.startswith(stripped)}
    env["OMP_NUM_THREADS"] = "1"
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "4",
           sys.executable, os.path.join(HERE, "mpirun_job.py")]
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
