"""The MoE layer's front door (issue 45, docs/routing.md "The --routing walk"): what it routes by and what
watches it are given when it is built (``monta.moe.MoE(choices=, observers=)``), so no module outside
``monta/moe`` writes the layer's steering attributes or its aux outputs, and no module-level mutable clock
or fault carries a run. AST checks over the source; each is shown to catch a planted offence."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("monta", "baselines", "analysis", "workflows", "tools")
# How the step once steered the layer from outside (step_router, transformer, pipeline), and the outputs
# DeepSpeed's MoE.forward reads off the layer, which only the layer's ``keep_aux`` writes (Lancet calls it).
STEERING = {"forced_choices", "tallies", "record_times", "l_aux", "exp_counts"}
# What the layer keeps from its constructor: only its own code (self.X) may set them.
CONSTRUCTED = {"choices", "observers"}
# The exchange, meter and chunk count change only through the layer's own ``use_exchange``: no write of them
# through a layer (an expression that names ``deepspeed_moe``, a layer or a moe) outside monta/moe. (The names
# alone are too common: an autograd ctx or a record has ``chunks`` too.)
SWAPPED = {"exchange", "meter", "chunks"}
LAYERISH = ("deepspeed_moe", "layer", "moe", "inner")
GLOBALS = {"monta/model/clock.py": "CLOCK", "monta/comm/timing.py": "BACKWARD_CLOCK", "monta/testaids.py": "FAULT"}
# Process-wide run state that moved onto the objects owning a run: the contention window (each ComputeClock's
# ``exchange``) and the dW sink (the model's Observers: ``defer_weight_grads``).
GLOBALS_GONE = {"monta/model/clock.py": "EXCHANGE"}
CLASS_GONE = {"monta/model/tp.py": "DeferredWeightGrad"}  # a class that held the process's sink


def _targets(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            yield from node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            yield node.target
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
            if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant):
                yield ast.copy_location(ast.Attribute(value=node.args[0], attr=node.args[1].value), node)


def steering_writes(source: str) -> list[str]:
    """``X.attr = ...`` writes of the layer's steering attributes (any X), or of its constructed ones on
    anything but ``self``, in one module's source."""
    out = []
    for t in _targets(ast.parse(source)):
        for node in ast.walk(t):
            if not isinstance(node, ast.Attribute):
                continue
            own = isinstance(node.value, ast.Name) and node.value.id == "self"
            through_layer = any(w in ast.unparse(node.value).lower() for w in LAYERISH)
            if (
                node.attr in STEERING
                or (node.attr in CONSTRUCTED and not own)
                or (node.attr in SWAPPED and through_layer)
            ):
                out.append(f"{ast.unparse(node)} (line {node.lineno})")
    return out


def module_globals(source: str, name: str) -> list[str]:
    """Module-level bindings of ``name`` (an assignment, or a ``global name`` in a function)."""
    tree = ast.parse(source)
    out = []
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and any(
            isinstance(t, ast.Name) and t.id == name for t in targets
        ):
            out.append(f"{name} = ... (line {node.lineno})")
    out += [f"global {name} (line {n.lineno})" for n in ast.walk(tree) if isinstance(n, ast.Global) and name in n.names]
    return out


def class_level_state(source: str, attr: str) -> list[str]:
    """Class-body bindings of ``attr`` (state every instance and the whole process share), and writes of
    ``Cls.attr`` where ``Cls`` is a class the module defines."""
    tree = ast.parse(source)
    classes = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    out = []
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for node in cls.body:
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            if any(isinstance(t, ast.Name) and t.id == attr for t in targets):
                out.append(f"{cls.name}.{attr} (line {node.lineno})")
    for t in _targets(tree):
        if isinstance(t, ast.Attribute) and t.attr == attr and isinstance(t.value, ast.Name) and t.value.id in classes:
            out.append(f"{ast.unparse(t)} = ... (line {t.lineno})")
    return out


def _sources():
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if not rel.startswith("monta/moe/"):
                yield rel, path.read_text()


def test_no_module_outside_monta_moe_writes_the_layers_steering_attributes():
    offences = {rel: w for rel, src in _sources() if (w := steering_writes(src))}
    assert not offences, offences


def test_no_module_level_clock_backward_clock_or_fault():
    for rel, name in GLOBALS.items():
        assert not module_globals((ROOT / rel).read_text(), name), rel


def test_no_process_wide_exchange_window_or_dw_sink():
    for rel, name in GLOBALS_GONE.items():
        assert not module_globals((ROOT / rel).read_text(), name), rel
    for rel, cls in CLASS_GONE.items():
        assert f"class {cls}" not in (ROOT / rel).read_text(), rel
    # nowhere: a class-level dW sink, or the window/sink written on a module or class from outside
    offences = {rel: w for rel, src in _sources() if (w := class_level_state(src, "sink"))}
    offences |= {
        rel: w
        for rel, src in _sources()
        if (w := [f"{ast.unparse(t)} (line {t.lineno})" for t in _targets(ast.parse(src)) if _process_wide(t)])
    }
    assert not offences, offences


def _process_wide(target: ast.AST) -> bool:
    """``X.EXCHANGE = ...`` or ``X.sink = ...`` where X is a capitalized name (a class) or a module alias."""
    return (
        isinstance(target, ast.Attribute)
        and target.attr in ("EXCHANGE", "sink")
        and isinstance(target.value, ast.Name)
        and (target.value.id[:1].isupper() or target.value.id in ("clock", "tp"))
    )


@pytest.mark.parametrize(
    "source, caught",
    [
        ("for moe in model.moe_layers():\n    moe.deepspeed_moe.forced_choices = c\n", 1),
        ("layer.tallies, x = None, 1\n", 1),
        ("m.deepspeed_moe.record_times += True\n", 1),
        ("setattr(layer, 'tallies', [])\n", 1),
        ("layer.observers = Observers()\nself.observers = o\nself.choices = c\n", 1),
        ("layer.observers.record_times(True)\nx = layer.choices\n", 0),
        ("layer.l_aux, layer.exp_counts = plan.l_aux, plan.exp_counts\n", 2),
        ("self.l_aux = l_aux\n", 1),
        ("layer.keep_aux(plan)\nout, l_aux = h, layer.l_aux\n", 0),
        ("inner = self.layer.deepspeed_moe\ninner.exchange = d\ninner.chunks = Fixed(2)\n", 2),
        ("self.layer.deepspeed_moe.meter = runner.meter\n", 1),
        ("self.layer.use_exchange(d, 2)\nctx.chunks, ctx.meter = n, m\np.chunks = 3\n", 0),
    ],
)
def test_the_steering_check_catches_a_planted_write(source, caught):
    assert len(steering_writes(source)) == caught


def test_the_global_check_catches_a_planted_clock():
    assert module_globals("CLOCK = None\n", "CLOCK")
    assert module_globals("CLOCK: int | None = None\n", "CLOCK")
    assert module_globals("def install(c):\n    global CLOCK\n", "CLOCK")
    assert not module_globals("def f():\n    CLOCK = 1\n", "CLOCK") and not module_globals("X = 1\n", "CLOCK")


def test_the_process_wide_state_checks_catch_a_planted_window_and_sink():
    assert module_globals("EXCHANGE = ExchangeWindow()\n", "EXCHANGE")
    assert class_level_state("class DeferredWeightGrad:\n    sink: Any = None\n", "sink")
    assert class_level_state("class D:\n    pass\n\n\ndef f(s):\n    D.sink = s\n", "sink")
    assert not class_level_state("class D:\n    def __init__(self):\n        self.sink = None\n", "sink")
    assert _process_wide(ast.parse("DeferredWeightGrad.sink = self").body[0].targets[0])
    assert _process_wide(ast.parse("clock.EXCHANGE = w").body[0].targets[0])
    assert not _process_wide(ast.parse("self.sink = s").body[0].targets[0])
