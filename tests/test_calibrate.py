"""Calibration: the fits on synthetic data, and the command line end to end (quick mode)."""

import json

import numpy as np
import pytest

from hpu import Profile
from hpu.calibrate import main
from hpu.core.calibrate import fit_affine, fit_knee, fit_plateau


def test_fit_knee_recovers_g():
    rng = np.random.default_rng(0)
    w = 2.0 ** np.arange(0, 18)
    t = np.maximum(1 / w, 1 / 4096) * np.exp(rng.normal(0, 0.05, w.size))
    assert fit_knee(w, t)["g"] == pytest.approx(4096, rel=0.15)


def test_fit_knee_is_robust_to_an_outlier():
    w = 2.0 ** np.arange(0, 16)
    t = np.maximum(1 / w, 1 / 1024)
    t[3] *= 5
    assert fit_knee(w, t)["g"] == pytest.approx(1024, rel=0.15)


def test_fit_knee_flat_means_no_parallelism():
    w = 2.0 ** np.arange(0, 12)
    assert fit_knee(w, np.full(w.size, 1e-3))["g"] == 1


def test_fit_knee_rejects_bad_input():
    with pytest.raises(ValueError, match=">= 3 positive"):  # two points only
        fit_knee([1, 2], [1, 2])
    with pytest.raises(ValueError, match=">= 3 positive"):  # a time of 0
        fit_knee([1, 2, 4], [1, 0, 2])
    with pytest.raises(ValueError, match="equal length"):
        fit_knee([1, 2, 4, 8], [1, 2, 3])


def test_fit_plateau():
    k = np.arange(1, 17)
    fit = fit_plateau(k, np.minimum(0.9 * k, 11.0))
    assert fit["p"] == pytest.approx(11.0, rel=0.02)
    assert fit["efficiency"] == pytest.approx(0.9, rel=0.02)


def test_fit_plateau_with_an_outlier_beyond_the_bounds():
    """Two threads timed 10x faster than one (a slowed one-thread run on a loaded machine): a fit, not an error."""
    fit = fit_plateau(np.array([1, 2]), np.array([1.0, 20.0]))
    assert 1.0 <= fit["p"] <= 2.0 and 0 < fit["efficiency"] <= 2.0


@pytest.mark.parametrize("speedup", [[1.0, 2.6], [1.0, 2.1, 4.3, 8.8, 17.5]])
def test_fit_plateau_never_exceeds_the_threads_measured(speedup):
    """Superlinear noise (2.6x on 2 threads) gave p = 2.6 effective cores on a 2-core machine."""
    k = 2.0 ** np.arange(len(speedup))
    assert 1.0 <= fit_plateau(k, np.array(speedup))["p"] <= k.max()


def test_fit_affine():
    b = 2.0 ** np.arange(12, 27)
    fit = fit_affine(b, 2e-5 + b / 5e10)
    assert fit["latency"] == pytest.approx(2e-5, rel=1e-3)
    assert fit["bandwidth"] == pytest.approx(5e10, rel=1e-3)


def test_quick_calibration_writes_a_valid_profile(tmp_path, capsys):
    out = tmp_path / "prof.json"
    assert main(["--quick", "--out", str(out), "--no-progress", "--plot", str(tmp_path / "plots")]) == 0
    prof = Profile.load(out)
    assert prof.p >= 1 and prof.g >= 1 and 0 < prof.gamma <= 1
    m = prof.measurements
    assert len(m["combine"]["sizes"]) == len(m["combine"]["cpu_seconds"])
    assert prof.cost_curves("sort").sizes and "cpu_sort" in prof.cost_curves("sort")
    assert "python -m hpu.calibrate" in prof.provenance["command"] and prof.provenance["date"]
    if "g" in m:  # a device was found
        assert len(m["g"]["work_items"]) == len(m["g"]["residuals"])
        assert m["transfer"]["pageable_h2d"]["bandwidth"] > 0
        assert (tmp_path / "plots" / "calibration_g.png").stat().st_size > 0
    assert "p (effective CPU cores)" in capsys.readouterr().out

    # A second run refuses to overwrite without --force, and leaves the file alone.
    before = out.read_text()
    assert main(["--quick", "--out", str(out), "--no-progress"]) == 2
    assert out.read_text() == before


def test_interrupted_calibration_saves_nothing(tmp_path, monkeypatch):
    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr("hpu.calibrate.calibrate", interrupted)
    out = tmp_path / "prof.json"
    assert main(["--quick", "--out", str(out), "--no-progress"]) == 130
    assert not out.exists() and not list(tmp_path.iterdir())


def test_an_output_that_cannot_be_written_is_refused_before_measuring(tmp_path, monkeypatch, capsys):
    def never(*a, **k):
        raise AssertionError("calibrated although the profile could not be saved")

    monkeypatch.setattr("hpu.calibrate.calibrate", never)
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("")
    cases = [(["--out", str(tmp_path / "dir"), "--force"], "is a directory"),
             (["--out", str(tmp_path / "file" / "p.json")], "cannot write in"),
             (["--out", str(tmp_path / "p.json"), "--plot", str(tmp_path / "file")], "is not a directory")]
    for args, message in cases:
        assert main(["--device", "none", "--quick", *args]) == 2
        assert message in capsys.readouterr().err


def test_unknown_device_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--device", "no-such-device-xyz", "--quick"])
    assert e.value.code == 2
    assert "unknown OpenCL device 'no-such-device-xyz'" in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [(["--device", "no-such-device-xyz"], "unknown OpenCL device"),
                                           (["--threads", "0"], "threads must be an integer >= 1"),
                                           (["--profile", "missing/profile"], "profile file not found"),
                                           (["--input", "missing.npy"], "missing.npy")])
def test_hpu_sort_reports_a_user_s_mistake_as_a_usage_error(args, message, capsys):
    """Status 2 and a message, as argparse gives (status 1, with a traceback, was also a result unlike numpy's)."""
    from hpu.cli import main as hpu_main

    with pytest.raises(SystemExit) as e:
        hpu_main(["sort", "--n", "1000", *args] if "--input" not in args else ["sort", *args])
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_hpu_sort_names_the_files_it_writes(tmp_path, capsys):
    from hpu.cli import main as hpu_main

    keys = np.random.default_rng(3).integers(-1000, 1000, 5000).astype(np.int32)
    np.save(tmp_path / "input.npy", keys)
    assert hpu_main(["sort", "--device", "none", "--input", str(tmp_path / "input.npy"),
                     "--output", str(tmp_path / "keys")]) == 0
    written = tmp_path / "keys.npy"  # numpy.save adds the suffix: the message names the file
    assert f"wrote {written}" in capsys.readouterr().out
    out = np.load(written)
    assert out.dtype == keys.dtype and np.array_equal(out, np.sort(keys))  # the input's keys, sorted


def test_cpu_only_calibration(tmp_path):
    out = tmp_path / "cpu.json"
    assert main(["--device", "none", "--quick", "--out", str(out), "--no-progress"]) == 0
    data = json.loads(out.read_text())
    assert data["g"] == 1 and data["gamma"] == 1 and data["p"] >= 1


def test_max_log_sets_the_largest_size_of_the_sort_curves(tmp_path, capsys):
    out = tmp_path / "prof.json"
    assert main(["--device", "none", "--quick", "--max-log", "17", "--out", str(out), "--no-progress"]) == 0
    assert Profile.load(out).cost_curves("sort").sizes == (1 << 14, 1 << 16, 1 << 17)
    for bad in ("15", "32", "x"):
        with pytest.raises(SystemExit) as e:
            main(["--device", "none", "--quick", "--max-log", bad, "--out", str(tmp_path / "p2.json")])
        assert e.value.code == 2 and "--max-log" in capsys.readouterr().err
    assert not (tmp_path / "p2.json").exists()
