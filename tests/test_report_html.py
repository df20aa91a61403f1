"""`snakemake --report report.html` renders the pipeline's report: every figure and table the
notebooks wrote is in it as a report(...) item with its caption, every image decodes, and (where a
headless Chromium is installed) every <img> loads in the browser.

One module-wide run of the pipeline's analysis half on synthetic records (the notebooks, tables,
figures and report page; the benchmarks' record files written as they would have left them), then
the report from it: no benchmark runs here."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from monta.results import make_record, write_records

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
PIPELINE_FILES = ("Snakefile", "workflows", "config", "analysis", "profiles")
FIGURES = ("alltoall_comparison", "chunk_ablation", "step_breakdown", "predicted_vs_measured")
pytestmark = pytest.mark.timeout(600)


def _a2a(size, variant, chunks, t, source="emulated"):
    return make_record(
        kind="alltoall",
        source=source,
        experiment="test",
        env={"python": "3"},
        params={"size_bytes": size, "variant": variant, "chunks": chunks, "nodes": 2, "gpus_per_node": 2}
        | {"tp": 2, "dtype": "float32", "inter_gbps": 1.0},
        metrics={"time_us": t, "busbw_GBps": size / t / 1e3, "inter_bytes": size, "intra_bytes": size, "wrong": 0},
    )


def _step(variant, ms):
    return make_record(
        kind="step",
        source="emulated",
        experiment="test",
        env={"python": "3"},
        params={"variant": variant, "nodes": 2, "gpus_per_node": 2, "tp": 2, "model": "mini", "topk": 1}
        | {"capacity_factor": 1.0},
        metrics={"step_ms": ms, "breakdown_ms": {"attention": 1.0, "dispatch": ms / 3, "experts": 2.0}},
    )


def _priced():
    """`monta predict accuracy` rows: the profile was calibrated at 2 Gbit/s, the measurement they were scored
    against (the 2x2 sweep's monta 2 chunks at 64 KiB, 200 us) ran at 1 Gbit/s, so they were priced at 1."""
    rec = _a2a(65536, "monta", 2, 190.0, source="predicted")
    del rec["params"]["inter_gbps"]
    rec["params"]["cluster"] = "emulator:lp"
    rec["metrics"]["measured_us"] = 200.0
    rec["config"] = {
        "profile": {"name": "lp", "topology": {"name": "a800-4nic", "inter_gbps": 2.0, "intra_gbps": 27.2}}
    }
    return [rec]


def snakemake(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "disabled"}
    return subprocess.run([SNAKEMAKE, *args], cwd=cwd, capture_output=True, text=True, timeout=500, env=env)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    """The analysis half run once on synthetic records, then `snakemake --report report.zip` (the
    zip holds the same HTML as report.html, with every item as a file to check)."""
    work = tmp_path_factory.mktemp("report")
    for name in PIPELINE_FILES:
        (work / name).symlink_to(ROOT / name)
    res = work / "results"
    a2a = [
        _a2a(s, v, c, t * s / 65536)
        for s in (65536, 131072)
        for v, c, t in (("legacy", 1, 400.0), ("monta", 1, 250.0), ("monta", 2, 200.0))
    ]
    for f in ("alltoall/2x2.jsonl", "ablation/chunks.jsonl", "ablation/tp/2.jsonl", "ablation/ratio/1.0.jsonl"):
        write_records(res / f, a2a)
    write_records(res / "step/2x2.jsonl", [_step("deepspeed", 30.0), _step("monta", 24.0)])
    write_records(res / "ablation/topk/1.jsonl", [_step("monta", 25.0)])
    pred = [_a2a(65536, "monta", 2, 190.0, source="predicted")]
    for f in ("paper", "alltoall", "plan"):
        write_records(res / f"predict/{f}.jsonl", pred + (_priced() if f == "alltoall" else []))
    for seq in (8192, 32768):
        write_records(res / f"ablation/seq/{seq}.jsonl", pred)
    targets = ["results/report.md", "results/report-assets/figures", "results/report-assets/tables"]
    proc = snakemake(*targets, "--cores", "2", "--configfile", "config/test.yaml", cwd=work)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    for kind in ("zip", "html"):
        proc = snakemake(
            "--report", f"report.{kind}", *targets, "--configfile", "config/test.yaml", "--cores", "1", cwd=work
        )
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return work


def _zip_items(work: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(work / "report.zip") as z:
        return {n: z.read(n) for n in z.namelist()}


def test_every_figure_and_table_is_a_report_item_with_its_caption(report):
    items = _zip_items(report)
    names = {Path(n).name for n in items}
    for fig in FIGURES:
        assert f"{fig}.png" in names, sorted(names)
    for table in ("alltoall_summary", "step_summary", "paper_comparison", "predicted_vs_measured"):
        assert f"{table}.csv" in names, table
    assert "report.md" in names
    html = (report / "report.html").read_text()
    # the captions of workflows/report/*.rst, rendered per item
    assert "MoNTA&#x27;s AllToAll time against its chunk count" in html or "time against its chunk count" in html
    assert "Training-step time per phase and variant" in html


def test_every_image_decodes(report):
    from PIL import Image

    pngs = {n: b for n, b in _zip_items(report).items() if n.endswith(".png")}
    assert len(pngs) >= len(FIGURES)
    for name, data in pngs.items():
        with Image.open(io.BytesIO(data)) as img:
            img.verify()  # raises on a truncated or corrupt file
        with Image.open(io.BytesIO(data)) as img:
            assert img.size[0] > 100 and img.size[1] > 100, name


# Appended to a copy of report.html: loads every image the page embeds and every <img> on it, then writes
# into the title how many there were and how many did not load (naturalWidth 0). It waits on each image's
# load/error event, a resource load that Chromium's virtual time waits for, not on img.decode(), which runs
# off the page's clock: under load the virtual-time budget could run out before a decode finished and the
# DOM was dumped with the title unset (seen in CI with both cores busy).
PROBE = r"""<script>window.addEventListener('load', () => {
  const uris = document.documentElement.innerHTML.match(/data:image\/png;[^,]*?base64,[A-Za-z0-9+\/=]+/g) || [];
  const loaded = i => (i.complete ? Promise.resolve() : new Promise(r => { i.onload = r; i.onerror = r; }));
  const imgs = [...document.images, ...uris.map(u => { const i = new Image(); i.src = u; return i; })];
  Promise.all(imgs.map(loaded)).then(() => {
    const bad = imgs.filter(i => !(i.complete && i.naturalWidth > 0));
    document.title = `EMBEDDED ${uris.length} IMGS ${imgs.length} BROKEN ${bad.length}`;
  });
});</script>"""


def _chromium() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


# What a browser on this closed network needs: no first-run, sync, component or background fetches (each
# a refused connection), a profile of its own per run.
QUIET = ["--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def test_every_image_loads_in_headless_chromium(report, tmp_path):
    """The single-file report.html opened in a browser. Its app shows a figure when its item is opened,
    so a script appended to a copy loads every image the page embeds (data:image/png URIs) and every
    <img> on the page, and writes into the title how many there were and how many have naturalWidth 0.
    On a developer's machine without Chromium it is skipped; in CI (.ci/run installs Debian's chromium)
    a missing browser fails it: the check of what users open must run there."""
    if _chromium() is None:
        if os.environ.get("CI"):
            pytest.fail("CI=true and no headless Chromium: .ci/run installs Debian's chromium; run it as root")
        pytest.skip("no headless Chromium installed (apt-get install chromium)")
    page = tmp_path / "page.html"
    html, end = (report / "report.html").read_text().rsplit("</body>", 1)  # the last: scripts quote the tag too
    page.write_text(html + PROBE + "</body>" + end)
    # Up to three tries with a growing virtual-time budget: a busy machine can still starve the browser's
    # threads; a page whose probe never reports fails with the end of what Chromium printed.
    for budget in (20_000, 60_000, 180_000):
        out = subprocess.run(
            [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", f"--virtual-time-budget={budget}"]
            + QUIET
            + [f"--user-data-dir={tmp_path / f'profile-{budget}'}", "--dump-dom", page.as_uri()],
            capture_output=True,
            text=True,
            timeout=180,
        ).stdout
        m = re.search(r"<title>EMBEDDED (\d+) IMGS (\d+) BROKEN (\d+)</title>", out)
        if m:
            break
    assert m, out[-2000:]
    embedded, _, broken = map(int, m.groups())
    assert embedded >= len(FIGURES) and broken == 0, m.group(0)


# An absolute path of this machine (a checkout, a temp dir, a home), as it would leak into a page read elsewhere.
MACHINE_PATH = r"(?<![\w.:/\]\)])/(?:work|tmp|home|root|Users|var|private)/"


def test_the_report_page_opens_with_the_claims_and_provenance_and_names_no_machine_path(report):
    text = (report / "results" / "report.md").read_text()
    lines = text.splitlines()
    assert lines[2:5] == ["## Did it reproduce?", "", "| claim | paper | emulated | predicted | verdict |"]
    after = next(i for i, line in enumerate(lines[4:], 4) if not line.startswith("|"))
    assert lines[after + 1].startswith("**Provenance**: commit ") and " cores · torch " in lines[after + 1]
    assert re.findall(MACHINE_PATH, text) == [], [line for line in lines if re.search(MACHINE_PATH, line)]
    assert "deviation" not in text.lower()
    assert not re.search(r"wrote \d+ records", text)  # `monta predict contention`'s stdout line is not pasted
    # the published table (one row per published measurement) is linked, not pasted
    assert "[the table](tables/published.md)" in text


def test_predictions_are_labelled_with_the_rate_they_were_priced_at(report):
    table = (report / "results" / "tables" / "alltoall_summary.md").read_text()
    assert "emulator links (inter 1 Gbit/s, intra 13.6 Gbit/s)" in table, table
    assert "inter 2 Gbit/s" not in table  # the profile's calibration rate, not what these rows were priced at
