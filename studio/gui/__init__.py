"""The Qt studio (PySide6, the ``gui`` extra): the only package that imports Qt.

Data flow: ``Session`` (headless) → ``QtMainWindow`` observes it → ``refresh`` →
scope tree → per-group layouts (``dot`` in a subprocess) → placement → scene items;
user edits → ``commands.ApplyCommand`` on the QUndoStack → ``Session.apply/undo/redo``.

Qt-free (tested without a display):

- ``passes.py``        forward / backward / optimizer per kernel (for the mirrored layout)
- ``scope_tree.py``    kernels grouped by ONNX name scopes; chunking; aggregated edges; ``updated``
                       rebuilds only the groups of the kernels a step touched
- ``graph_diff.py``    kernels removed / added / changed between two session states (fast; hints
                       from applied steps), for incremental updates
- ``layout.py``        layout shapes, the signature cache, ``run_layout`` (subprocess, timeout,
                       cancel), quick ``layered`` and ``patched`` layouts
- ``layout_proc.py``   the layout child process (pygraphviz ``dot`` → json0 → boxes and curves)
- ``placement.py``     nested group layouts → absolute positions of frames, boxes, edges
- ``heatmap.py``       linear / log / rank scaling, the colour ramp, per-box sums
- ``timings.py``       a profile mapped back onto the graph (lowered ids → kernels), coverage, staleness
- ``roofline.py``      roofline geometry: log-log axes, roofs, ridge, point placement, hover
- ``describe.py``      box labels, edge tooltips, the properties HTML
- ``ranking.py``       ranked matches per Selection / Viewport / Whole graph; ``preview``
- ``compare.py``       a step against the current graph: diff marks, summary, counterparts
- ``loading.py``       open a model (or the training step generated from it) and replay histories
                       into a new Session (off the GUI thread); training options from the dialog
- ``exporting.py``     export target checks, the cancellable staged export, the ``--check`` verdict,
                       whether a CUDA device is present
- ``jobs.py``          ``CancelToken``, ``Cancelled``
- ``screenshots.py``   real-window screenshots under Xvfb (``python -m studio.gui.screenshots DIR``)

Qt:

- ``qt_app.py``         ``run(model, history)``: the application (``dcstudio open``)
- ``qt_main_window.py`` the window: docks, undo stack, refresh, tasks, files, messages
- ``qt_menus.py``       actions, menus, shortcuts, recent files
- ``commands.py``       ``ApplyCommand`` (one Session method per redo/undo)
- ``qt_graph_view.py``  the graph view (expand/collapse, marks, heatmap, selection, tooltips)
- ``qt_scene.py``       the scene, synced incrementally with a placement
- ``qt_graph_items.py`` box, frame and edge items (level-of-detail drawing)
- ``qt_overlays.py``    heatmap legend, minimap
- ``qt_peak.py``        the Memory figure's peak bytes per graph, computed off the GUI thread
- ``outline.py``, ``qt_outline.py``  the Outline dock: layers × forward/grad/update with their figures
- ``qt_transformations.py``, ``qt_ranking.py``  the Transformations dock and its background ranking
- ``qt_movement.py``    the Data movement dock (totals, kernel table, trend plot)
- ``qt_kernel_tables.py``  the kernel tables' shared rows model and selection sync
- ``qt_timings.py``, ``qt_timing_table.py``, ``qt_roofline.py``  the Timings dock, its table, the roofline
- ``qt_profiling.py``   profile / A/B / Chrome trace as background tasks with cancel; stale marking
- ``qt_compare.py``     the Compare window: two synced graph views, diff marks and legend
- ``qt_properties.py``, ``qt_history.py``, ``qt_find.py``, ``qt_palette.py``, ``qt_batch.py``
                        properties, history (QUndoView), find, command palette, apply-all
- ``qt_export_dialog.py``  File → Export module…: backend, folder, name, progress, Cancel, the check
- ``qt_training_dialog.py`` a forward model: generate its training step (loss, optimizer) or open as is
- ``qt_workers.py``     ``QtTask`` (QThreadPool work with progress and cancel), ``QtTaskBar``
- ``qt_dialogs.py``, ``qt_text.py``  non-modal messages; a status line that does not re-lay out
"""
