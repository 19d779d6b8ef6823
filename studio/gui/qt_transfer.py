"""Edit → Repeat on equal layers: the steps just applied inside one layer, repeated on every
structurally equal layer as one undoable transfer step (``Session.transfer``,
``transforms.transfer``). The run of steps is the longest trailing one inside a single layer
(``Session.layer_run``); the equal layers are those equal to it before those steps. When there is
nothing to repeat the window says why and what to do instead."""
from __future__ import annotations

from studio.gui.commands import ApplyCommand, step_text
from studio.gui.ranking import copy_layers
from transforms.history import TRANSFER
from transforms.layers import layer_of


def repeat_on_equal_layers(window) -> bool:
    """Push the transfer as an undoable command; False (and a message) when there is none."""
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
    equal = s.equal_layers(layer, k)
    if not equal:
        window.say(f"No layer is structurally equal to {layer}", error=True,
                   detail=f"The last {k} steps lie inside {layer}, but no other layer computed the same thing on "
                          "the same shapes before them")
        return False
    cmd = ApplyCommand(s, TRANSFER, (), {"layer": layer, "steps": k, "to": equal},
                       text=f"repeat {k} step{'s' if k > 1 else ''} of {layer} on {len(equal)} equal "
                            f"layer{'s' if len(equal) > 1 else ''}",
                       first=lambda: s.transfer(layer, k, equal))
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
    layers of its copies, as one undoable macro. When either fails, nothing stays applied."""
    s, stack = window.session, window.stack
    name, anchors = r.transformation.name, r.match.anchors
    family, index = layer_of(anchors[0])
    layer, targets = family.key(index), copy_layers(r)
    start, applied = stack.index(), s.cursor
    stack.beginMacro(f"{name} on {1 + len(targets)} equal layers ({layer} → {', '.join(targets)})")
    cmd = ApplyCommand(s, name, anchors, r.transformation.params())
    stack.push(cmd)
    repeat = None
    if cmd.error is None:
        repeat = ApplyCommand(s, TRANSFER, (), {"layer": layer, "steps": 1, "to": targets},
                              text=f"repeat {name} of {layer} on {len(targets)} equal layers",
                              first=lambda: s.transfer(layer, 1, targets))
        stack.push(repeat)
    stack.endMacro()
    error = cmd.error or (repeat.error if repeat is not None else None)
    if error is not None:
        if stack.index() > start:         # undo the half that applied, and drop the macro (obsolete on undo)
            stack.command(start).setObsolete(True)
            stack.undo()
        while s.cursor > applied:         # Qt dropped the macro with its failed part: take back what applied
            s.undo()
        window.say(f"{name} could not be applied on the equal layers", error=True, detail=error.summary)
        return False
    return True
