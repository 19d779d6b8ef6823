"""Readable at every zoom: summary plates on the groups when zoomed out, zoom to a Find hit or the
selection, and single-key shortcuts that never take a letter typed elsewhere.

Before: below zoom 0.45 every box was an unlabelled rectangle, Fit on the bundled example showed
nothing readable, Find centred a hit as a 10-pixel dash, there was no zoom to selection, and
"F" (Fit) fired while the user typed into a table.
"""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor

from studio.gui.overview import FIT_H, FIT_W, LOD_TEXT, PLATE_H, TOP_DEPTH, place_plates, plate_levels, plate_text
from tests.gui.test_session_flow import _open


def test_plates_stack_inside_their_groups_and_drop_when_there_is_no_room():
    groups = [("outer", 1, (0, 0, 400, 300)), ("first", 2, (10, 20, 200, 120)), ("tiny", 2, (10, 150, 200, 30)),
              ("right", 2, (230, 20, 160, 200))]
    placed = place_plates(groups, {"outer": 150, "first": 120, "tiny": 100, "right": 90})
    assert placed["outer"][:2] == (3, 3)
    ox, oy, ow, oh = placed["outer"]
    fx, fy, fw, fh = placed["first"]
    assert fy >= oy + oh, "the first child's plate moves below its parent's"
    assert fy + fh <= 20 + 120, "and stays inside its group"
    assert "tiny" not in placed, "a group too short for a plate shows none"
    assert placed["right"][:2] == (233, 23), "a plate that overlaps nothing stays at its corner"


def test_top_level_plates_show_however_small_their_group():
    """At 12 layers the optimizer's updates make the layout so wide that no group reached its plate
    size at Fit: the view showed no text at all. The step's top-level parts are always named (a
    plate may cover its neighbours), stacked so they never overlap; an inner group too small is not."""
    groups = [("forward", 1, (300, 10, 12, 50)), ("loss", 1, (300, 80, 10, 3)), ("grad", 1, (300, 84, 30, 200)),
              ("grad/layer", 2, (301, 90, 28, 30))]
    placed = place_plates(groups, {k: 180 for k, *_ in groups})
    assert set(placed) == {"forward", "loss", "grad"}
    rects = list(placed.values())
    assert all(not (a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3])
               for i, a in enumerate(rects) for b in rects[i + 1:]), "plates never overlap"


def test_levels_and_text_on_the_bundled_example(qtbot, make_window, bert_model):
    w = make_window()
    _open(qtbot, w, bert_model)
    v, s = w.view, w.session
    levels = plate_levels(v.placement, v.tree)
    assert set(levels) == {f.key for f in v.placement.frames.values()} | \
        {b.key for b in v.placement.boxes.values() if v.tree.is_group(b.key)}
    for lv in levels.values():
        if lv.depth <= TOP_DEPTH:                                                     # always named
            assert lv.own == 0.0 and lv.shows(0.01)
            continue
        assert lv.w * lv.own >= FIT_W - 1e-6 and lv.h * lv.own >= FIT_H - 1e-6      # fits from its own zoom on
        assert lv.w * lv.own <= FIT_W + 1e-6 or lv.h * lv.own <= FIT_H + 1e-6       # and not before
    key = max(levels, key=lambda k: levels[k].w * levels[k].h)
    name, line = plate_text(v.tree, s.ledger, key)
    members = v.tree.members(key)
    assert name == v.tree.label(key) and line.startswith(f"{len(members)} kernels · ")
    assert plate_text(v.tree, s.ledger, key, {members[0]: 1500.0})[1].endswith(" · 1.5 ms (1 timed)")


def _dark_pixels(image, rect) -> int:
    n = 0
    for x in range(int(rect.left()) + 2, int(rect.right()) - 2, 2):
        for y in range(int(rect.top()) + 2, int(rect.bottom()) - 2, 2):
            if QColor(image.pixel(x, y)).lightnessF() < 0.3:
                n += 1
    return n


def test_fit_is_readable_through_the_plates(qtbot, make_window, bert_model):
    w = make_window()
    _open(qtbot, w, bert_model)
    v = w.view
    v.setFocus()
    w.actions_.fit.trigger()
    assert v.transform().m11() < LOD_TEXT, "the whole BERT layer does not fit at a zoom where kernel labels read"
    plates = v.plates()
    assert len(plates) >= 3, "Fit names the main blocks of the layer"
    names = {name for _k, _r, name, _line in plates}
    assert {"layer", "attention"} <= names
    assert all("kernels ·" in line and "%" in line for *_x, line in plates)
    for _k, r, _n, _l in plates:
        assert r.height() == PLATE_H and v.viewport().rect().intersects(r.toRect())
    image = v.viewport().grab().toImage()
    _key, rect, _name, _line = plates[0]
    assert _dark_pixels(image, rect) > 15, "the plate's text is drawn"
    v.resetTransform()                                # at zoom 1 the kernels' own labels take over
    assert v.plates() == []


def test_find_zooms_to_the_hit_and_z_frames_the_selection(qtbot, make_window, bert_model):
    w = make_window()
    _open(qtbot, w, bert_model)
    v = w.view
    w.actions_.fit.trigger()
    assert v.transform().m11() < LOD_TEXT
    w.find_bar.field.setText("GeluGrad")
    hit = w.find_bar.hits[w.find_bar.index]
    qtbot.waitUntil(lambda: v.transform().m11() >= LOD_TEXT and v.task is None, timeout=60_000)
    box = v.boxes[v.tree.visible(hit, v.expanded)].sceneBoundingRect()
    assert v.mapToScene(v.viewport().rect()).boundingRect().contains(box), "the hit is on screen"

    w.actions_.fit.trigger()
    ids = [i for i in w.session.graph.nodes if i.startswith("/layer/attention/self/")][:3]
    v.select(ids)
    v.setFocus()
    qtbot.keyClick(v.viewport(), Qt.Key.Key_Z)
    seen = v.mapToScene(v.viewport().rect()).boundingRect()
    for k in v.selected_keys():
        assert seen.contains(v.boxes[k].sceneBoundingRect())
    assert v.transform().m11() > 0.2


def test_single_key_shortcuts_leave_typed_letters_alone(qtbot, make_window, bert_model):
    w = make_window()
    _open(qtbot, w, bert_model)
    fired = []
    w.actions_.fit.triggered.connect(lambda *_: fired.append("fit"))
    table = w.movement.table
    table.setFocus()
    table.setCurrentIndex(table.model().index(0, 0))
    qtbot.keyClick(table, Qt.Key.Key_F)               # the table's keyboard search gets the letter
    assert fired == []
    w.view.setFocus()
    qtbot.keyClick(w.view.viewport(), Qt.Key.Key_F)
    assert fired == ["fit"]
    assert w.actions_.fit in w.view.actions() and w.actions_.zoom_selection in w.view.actions()
    palette = w.show_palette()                        # the command palette still lists them
    listed = [a.text().replace("&", "") for a in palette.actions_]
    palette.close()
    assert "Fit graph" in listed and "Zoom to selection" in listed


def test_edges_are_labelled_when_zoomed_in(qtbot, make_window, bert_model):
    from studio.gui.describe import edge_label
    from studio.gui.qt_graph_items import LOD_EDGE_LABEL
    w = make_window()
    _open(qtbot, w, bert_model)
    v = w.view
    scene = v.scene()
    item = next(e for e in scene.edge_items.values() if len(v.tree.edges[e.group][(e.src, e.dst)]) == 1
                and e.label_box is not None)
    containers = v.tree.edges[item.group][(item.src, item.dst)]
    c = w.session.graph.containers[containers[0]]
    text = scene.edge_label(item)
    assert text == edge_label(w.session.graph, containers) and str(c.shape[0]) in text and text.endswith("B")
    assert item.boundingRect().contains(item.label_box), "the label is painted inside the item's bounds"
    v.resetTransform()
    v.scale(LOD_EDGE_LABEL * 1.2, LOD_EDGE_LABEL * 1.2)
    v.centerOn(item.label_box.center())
    image = v.viewport().grab().toImage()
    box = v.mapFromScene(item.label_box).boundingRect()
    dark = sum(1 for x in range(box.left(), box.right(), 2) for y in range(box.top(), box.bottom(), 2)
               if 0 <= x < image.width() and 0 <= y < image.height()
               and QColor(image.pixel(x, y)).lightnessF() < 0.3)
    assert dark > 5, "the label's text is drawn"


def test_edge_labels_never_overlap(qtbot, make_window, bert_model):
    """Before: every label sat at its edge's midpoint, parallel edges' labels covered each other and
    some hid under boxes. Each edge now takes the first free spot along it, or shows no label (its
    tooltip still tells)."""
    w = make_window()
    _open(qtbot, w, bert_model)
    for key in list(w.view.tree.groups)[:40]:        # open groups: denser edges
        if key not in w.view.expanded and w.view.tree.is_group(key):
            w.view.expand(key)
    qtbot.waitUntil(lambda: w.view.task is None, timeout=60000)
    items = list(w.view.scene().edge_items.values())
    boxes = [e.label_box for e in items if e.label_box is not None]
    assert len(boxes) >= 0.5 * len(items) > 10, "most edges keep a label"
    assert not [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:] if a.intersects(b)]
    kernels = [b.sceneBoundingRect() for b in w.view.scene().boxes.values()]
    assert not [a for a in boxes for k in kernels if a.intersects(k)], "no label hides under a box"
    assert all(e.boundingRect().contains(e.label_box) for e in items if e.label_box is not None)
    assert any(e.label_box is not None and e.label_box != e.label_spots[0] for e in items) or \
        len(boxes) == len(items), "a crowded midpoint moves the label along its edge"


def test_find_lists_its_hits_and_searches_container_names(qtbot, make_window, bert_model):
    from studio.gui.qt_find import find_hits
    w = make_window()
    _open(qtbot, w, bert_model)
    g = w.session.graph
    texts = [(n.id.lower(), n.name.lower()) for n in g.nodes.values()]
    name = next(c for c in sorted(g.containers) if len(c) > 12 and not any(c.lower() in a or c.lower() in b
                                                                            for a, b in texts))
    hits = find_hits(g, name)
    named = [c for c in g.containers if name.lower() in c.lower()]
    touching = {n.id for c in named for n in [g.producer(c), *g.consumers(c)] if n is not None}
    assert hits and {i for i, _w in hits} == touching
    assert all(why.split(" ", 1)[0] in ("writes", "reads") and why.split(" ", 1)[1] in named for _i, why in hits)
    writer = g.producer(name)
    if writer is not None:
        assert (writer.id, f"writes {name}") in hits

    bar = w.find_bar
    bar.field.setText(name)
    assert bar.hits == [i for i, _w in hits] and bar.count.text() == f"1 of {len(hits)}"
    bar.list_button.click()
    assert bar.results.isVisible() and bar.results.count() == len(hits)
    assert name in bar.results.item(0).text()
    last = bar.results.item(len(hits) - 1)
    bar._chosen(last)
    assert not bar.results.isVisible() and bar.index == len(hits) - 1
    assert w.view.marks["current"] == {hits[-1][0]}
