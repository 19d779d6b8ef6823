"""Edit → Repeat on equal layers: the steps just applied inside one layer, repeated on every
structurally equal layer as one undoable transfer step (``Session.transfer``,
``transforms.transfer``). The run of steps is the longest trailing one inside a single layer
(``Session.layer_run``); the equal layers are those equal to it before those steps. When there is
nothing to repeat the window says why and what to do instead.

The transfer is worked out on a worker thread (``Session.plan_transfer``: finding the equal layers,
rewriting them and hashing the result took 0.75-1.6 s of the GUI thread at 12 layers) and recorded
on the GUI thread (``Session.commit``), which refuses it if the session changed meanwhile. A ranked
row standing for equal layers ("× N") plans its apply and the transfer after it the same way."""
from __future__ import annotations

from dataclasses import replace

from studio.gui import graph_diff
from studio.gui.commands import ApplyCommand, step_text
from studio.gui.jobs import foreground
from studio.gui.ranking import copy_layers
from transforms.history import TRANSFER
from transforms.layers import layer_of


def _plan(session, layer: str, k: int, targets: list[str] | None, first: tuple | None, token, progress,
          shown: tuple | None = None):
    """On a worker: [the planned apply of ``first`` (name, anchors, params), if any, then the transfer];
    None when no layer is equal to ``layer``. ``shown``: the view's (graph, scope tree); when the plan starts
    from that graph, the last planned graph's tree is derived here too (``Planned.tree``), not on the GUI
    thread when the view follows the commit."""
    with foreground():                                 # the ranking gives way while the user waits
        return _plan_steps(session, layer, k, targets, first, token, progress, shown)


def _plan_steps(session, layer, k, targets, first, token, progress, shown):
    progress(0, 0, f"working out the steps on the layers equal to {layer}…")
    planned = [session.plan_apply(*first)] if first is not None else []
    token.check("repeating on equal layers")
    if targets is None:
        targets = session.equal_layers(layer, k)
        if not targets:
            return None
    planned.append(session.plan_transfer(layer, k, targets, after=planned[0] if planned else None))
    if shown is not None and shown[0] is planned[0].base:
        final = planned[-1].graph
        planned[-1] = replace(planned[-1], tree=shown[1].updated(final, graph_diff.changes(shown[0], final).touched))
    return planned


def _start(window, title: str, layer: str, k: int, targets, first, done, fail: str) -> bool:
    """Plan on a worker; ``done(planned)`` on the GUI thread. False when a repeat is already being worked out."""
    if window._transfer_task is not None:
        window.say("Still working out the last repeat on equal layers", error=True,
                   detail="Wait for it to finish (the status bar shows it), then try again")
        return False
    s, view = window.session, window.view
    shown = (view.graph, view.tree) if view.tree is not None else None
    task = window.run_task(title, lambda token, progress: _plan(s, layer, k, targets, first, token, progress, shown),
                           context={"fail": fail})
    window._transfer_task = task

    def finished() -> None:
        window._transfer_task = None
    task.finished.connect(finished)
    task.succeeded.connect(lambda planned: done(_seeded(window, planned)) if window.session is s else None)
    task.failed.connect(window._task_failed)
    return True


def _seeded(window, planned):
    """Hand the view the scope tree the worker derived for the planned graph."""
    if planned and planned[-1].tree is not None:
        window.view.seed_tree(planned[-1].graph, planned[-1].tree)
    return planned


def repeat_on_equal_layers(window) -> bool:
    """Work out the transfer on a worker, then push it as an undoable command; False (and a message) when
    there is nothing to repeat."""
    s = window.session
    if s is None:
        window.say("Open a model first", error=True)
        return False
    run = s.layer_run()
    if run is None:
        window.say("The last step is not inside one layer", error=True,
                   detail="Apply transformations to the kernels of one layer (such as layer.0), or a pass limited "
                          "to it, then repeat them on the layers equal to it")
        return False
    layer, k = run
    return _start(window, f"Repeating the last {k} step{'s' if k > 1 else ''} of {layer} on equal layers",
                  layer, k, None, None, lambda planned: _push_repeat(window, layer, k, planned),
                  f"Could not repeat the steps of {layer}")


def _push_repeat(window, layer: str, k: int, planned) -> bool:
    s = window.session
    if planned is None:
        window.say(f"No layer is structurally equal to {layer}", error=True,
                   detail=f"The last {k} steps lie inside {layer}, but no other layer computed the same thing on "
                          "the same shapes before them")
        return False
    equal = planned[-1].step.params["to"]
    cmd = ApplyCommand(s, TRANSFER, (), planned[-1].step.params,
                       text=f"repeat {k} step{'s' if k > 1 else ''} of {layer} on {len(equal)} equal "
                            f"layer{'s' if len(equal) > 1 else ''}",
                       first=lambda: s.commit(planned[-1]))
    window.stack.push(cmd)
    if cmd.error is not None:
        window.say(f"Could not repeat the steps of {layer}", error=True, detail=cmd.error.summary)
        return False
    cmd.setText(step_text(TRANSFER, (), cmd.application.delta.bytes, s.steps[s.cursor - 1].applications)
                + f" ({layer} → {len(equal)} layer{'s' if len(equal) > 1 else ''})")
    return True


def hint(window, app) -> None:
    """After an apply inside a layer: say in the status bar that it can be repeated."""
    s = window.session
    run = s.layer_run() if s is not None and app is not None and app.transformation != TRANSFER else None
    if run is not None:
        window.statusBar().showMessage(f"Inside {run[0]}: Edit → Repeat on equal layers (Ctrl+Shift+L) applies "
                                       f"the last {run[1]} step{'s' if run[1] > 1 else ''} to every equal layer",
                                       8000)


def apply_on_equal_layers(window, r) -> bool:
    """A ranked row that stands for equal layers ("× N"): apply its match, then repeat that step on the
    layers of its copies, as one undoable macro, both worked out on a worker first. When either fails,
    nothing stays applied. False (and a message) when it cannot start."""
    name, anchors = r.transformation.name, r.match.anchors
    family, index = layer_of(anchors[0])
    layer, targets = family.key(index), copy_layers(r)
    fail = f"{name} could not be applied on the equal layers"
    return _start(window, f"Applying {name} on {1 + len(targets)} equal layers", layer, 1, targets,
                  (name, anchors, r.transformation.params()),
                  lambda planned: _push_on_equal_layers(window, name, anchors, layer, targets, planned, fail), fail)


def _push_on_equal_layers(window, name, anchors, layer, targets, planned, fail: str) -> bool:
    s, stack = window.session, window.stack
    start, applied = stack.index(), s.cursor
    stack.beginMacro(f"{name} on {1 + len(targets)} equal layers ({layer} → {', '.join(targets)})")
    cmd = ApplyCommand(s, name, anchors, planned[0].step.params, first=lambda: s.commit(planned[0]))
    stack.push(cmd)
    repeat = None
    if cmd.error is None:
        repeat = ApplyCommand(s, TRANSFER, (), {"layer": layer, "steps": 1, "to": targets},
                              text=f"repeat {name} of {layer} on {len(targets)} equal layers",
                              first=lambda: s.commit(planned[1]))
        stack.push(repeat)
    stack.endMacro()
    error = cmd.error or (repeat.error if repeat is not None else None)
    if error is not None:
        if stack.index() > start:         # undo the half that applied, and drop the macro (obsolete on undo)
            stack.command(start).setObsolete(True)
            stack.undo()
        while s.cursor > applied:         # Qt dropped the macro with its failed part: take back what applied
            s.undo()
        window.say(fail, error=True, detail=error.summary)
        return False
    return True
