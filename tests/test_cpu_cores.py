"""ddp_lab.hardware.machine.cpu_cores: the affinity mask, capped by the cgroup CPU quota.

JupyterHub on Kubernetes and `docker --cpus` show every core of the host and cap CPU time
through the cgroup instead. The cgroup trees here are fake ones in tmp_path, laid out as
the kernel lays them out (v2: one tree, `cpu.max`; v1: one tree per controller,
`cpu.cfs_quota_us` / `cpu.cfs_period_us`); the last test puts a real process into a real
cgroup where this machine allows it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from ddp_lab.hardware.machine import MachineReport, cgroup_cpu_quota, cores_allowed, cpu_cores, visible_cores

VISIBLE = visible_cores()


def fake_cgroup(tmp_path: Path, proc_lines: list[str], files: dict[str, str]) -> tuple[Path, Path]:
    """A /proc/self/cgroup with `proc_lines` and a /sys/fs/cgroup tree holding `files` (path -> content)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text("".join(f"{line}\n" for line in proc_lines))
    root = tmp_path / "sys-fs-cgroup"
    root.mkdir()
    for name, content in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(content + "\n")
    return proc, root


def quota(tmp_path: Path, proc_lines: list[str], files: dict[str, str]) -> float | None:
    return cgroup_cpu_quota(*fake_cgroup(tmp_path, proc_lines, files))


# --- cgroup v2: cpu.max ---------------------------------------------------------------------------

def test_v2_quota_of_the_process_cgroup(tmp_path):
    assert quota(tmp_path, ["0::/user.slice/notebook"], {"user.slice/notebook/cpu.max": "150000 100000"}) == 1.5


def test_v2_max_means_no_limit(tmp_path):
    assert quota(tmp_path, ["0::/user.slice/notebook"], {"user.slice/notebook/cpu.max": "max 100000"}) is None


def test_v2_inside_a_container_reads_the_root(tmp_path):
    """docker --cpus=2: the container's own cgroup is mounted at /sys/fs/cgroup."""
    assert quota(tmp_path, ["0::/"], {"cpu.max": "200000 100000"}) == 2.0
    # without a cgroup namespace the line names the host's path, which the container cannot see
    assert quota(tmp_path / "host-path", ["0::/kubepods/pod7/ctr"], {"cpu.max": "200000 100000"}) == 2.0


def test_v2_a_limit_on_an_enclosing_cgroup_counts(tmp_path):
    """Kubernetes sets the pod's limit one level above the container: the smallest limit wins."""
    files = {"kubepods/pod7/ctr/cpu.max": "max 100000", "kubepods/pod7/cpu.max": "100000 100000",
             "kubepods/cpu.max": "max 100000"}
    assert quota(tmp_path, ["0::/kubepods/pod7/ctr"], files) == 1.0


# --- cgroup v1: cpu.cfs_quota_us / cpu.cfs_period_us ------------------------------------------------

V1_LINES = ["11:memory:/docker/abc", "4:cpu,cpuacct:/docker/abc", "1:name=systemd:/docker/abc"]


def test_v1_quota(tmp_path):
    files = {"cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "250000", "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000"}
    assert quota(tmp_path, V1_LINES, files) == 2.5


def test_v1_minus_one_means_no_limit(tmp_path):
    files = {"cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "-1", "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000"}
    assert quota(tmp_path, V1_LINES, files) is None


def test_v1_controller_mounted_on_its_own(tmp_path):
    """Some hosts mount `cpu` alone (/sys/fs/cgroup/cpu) and name the line "4:cpu:/..."."""
    files = {"cpu/job/cpu.cfs_quota_us": "50000", "cpu/job/cpu.cfs_period_us": "100000"}
    assert quota(tmp_path, ["4:cpu:/job", "3:cpuacct:/job"], files) == 0.5


# --- nothing to read ------------------------------------------------------------------------------

def test_missing_or_unreadable_files_mean_no_limit(tmp_path):
    assert cgroup_cpu_quota(tmp_path / "no-such-proc-file", tmp_path) is None
    assert quota(tmp_path / "a", ["0::/x"], {}) is None  # no cpu.max anywhere
    assert quota(tmp_path / "b", V1_LINES, {"cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "100000"}) is None  # no period
    assert quota(tmp_path / "c", ["0::/x"], {"x/cpu.max": "garbage"}) is None
    assert quota(tmp_path / "d", ["not a cgroup line", "0::/x"], {"x/cpu.max": "100000 0"}) is None


# --- from quota to cores ------------------------------------------------------------------------

@pytest.mark.parametrize("visible, cpus, expected", [
    (16, None, 16),  # no quota: the affinity mask decides
    (16, 1.5, 2),    # 1.5 CPUs keep 2 cores busy: round up
    (16, 2.0, 2),
    (4, 8.0, 4),     # a quota above the visible cores changes nothing
    (16, 0.2, 1),    # at least 1
])
def test_cores_allowed(visible, cpus, expected):
    assert cores_allowed(visible, cpus) == expected


def test_cpu_cores_reads_the_quota(tmp_path):
    one_cpu = fake_cgroup(tmp_path / "one", ["0::/"], {"cpu.max": "100000 100000"})
    assert cpu_cores(*one_cpu) == 1
    half_a_cpu = fake_cgroup(tmp_path / "half", ["0::/"], {"cpu.max": "50000 100000"})
    assert cpu_cores(*half_a_cpu) == 1
    above = fake_cgroup(tmp_path / "above", ["0::/"], {"cpu.max": f"{(VISIBLE + 6) * 100000} 100000"})
    assert cpu_cores(*above) == VISIBLE
    none = fake_cgroup(tmp_path / "none", ["0::/"], {"cpu.max": "max 100000"})
    assert cpu_cores(*none) == VISIBLE


def test_doctor_says_when_the_quota_decides():
    def cores_line(report: MachineReport) -> str:
        return next(line for line in report.lines() if line.startswith("CPU cores"))

    quota_limited = MachineReport(python="3.12.0", torch="2.13.0", cuda_build=None, cpu_cores=2, cores_visible=16)
    assert cores_line(quota_limited) == "CPU cores           2 (cgroup CPU quota; 16 visible)"
    plain = MachineReport(python="3.12.0", torch="2.13.0", cuda_build=None, cpu_cores=16, cores_visible=16)
    assert cores_line(plain) == "CPU cores           16"


# --- the real thing -------------------------------------------------------------------------------

def test_this_process_reads_its_own_cgroup():
    found = cgroup_cpu_quota()
    assert found is None or found > 0
    assert cpu_cores() == cores_allowed(VISIBLE, found)


@pytest.fixture
def real_v1_cpu_cgroup():
    """A fresh cgroup v1 `cpu` cgroup, where this machine lets the test create one (root, writable)."""
    mount = Path("/sys/fs/cgroup/cpu")
    if not (mount / "cpu.cfs_quota_us").is_file():
        pytest.skip(f"no cgroup v1 cpu controller at {mount}")
    directory = mount / f"ddp_lab-test-{uuid.uuid4().hex[:8]}"
    try:
        directory.mkdir()
    except OSError as error:
        pytest.skip(f"cannot create a cgroup here ({error.strerror}): needs root and a writable {mount}")
    try:
        yield directory
    finally:
        directory.rmdir()  # empty again: the process inside has exited


@pytest.mark.parametrize("quota_us, period_us", [(50_000, 100_000), (150_000, 100_000)])
def test_a_process_in_a_real_quota_cgroup_counts_its_quota(real_v1_cpu_cgroup, quota_us, period_us):
    (real_v1_cpu_cgroup / "cpu.cfs_period_us").write_text(str(period_us))
    (real_v1_cpu_cgroup / "cpu.cfs_quota_us").write_text(str(quota_us))
    procs = str(real_v1_cpu_cgroup / "cgroup.procs")

    def join_the_cgroup():  # in the child, before it runs Python
        with open(procs, "w") as handle:
            handle.write(str(os.getpid()))

    done = subprocess.run([sys.executable, "-c", "import ddp_lab.hardware.machine as m; print(m.cpu_cores(), m.cgroup_cpu_quota())"],
                          capture_output=True, text=True, timeout=60, preexec_fn=join_the_cgroup, check=True)
    cores, cpus = done.stdout.split()
    assert float(cpus) == quota_us / period_us
    assert int(cores) == min(VISIBLE, -(-quota_us // period_us))


def test_doctor_reports_this_torch_gloo_and_a_rank_count():
    """What lesson 00 reads off `ddp_lab.doctor()` (its checks of the report itself live here): the torch running,
    gloo built in, at least one recommended rank."""
    import torch

    from ddp_lab.hardware.machine import doctor

    report = doctor()
    assert report.torch == torch.__version__
    assert report.backends["gloo"] and report.recommended_nprocs >= 1
