"""File → Export module…: backend, target folder and package name, progress, Cancel, the check.

The dialog is window-modal (the graph cannot change under the export). The name is
validated as you type (``exporting.target_problem``); Export runs
``exporting.export_session`` as a ``QtTask`` (the window's, so closing the window cancels
it), then the package's ``python -m <name> --check`` in a ``QProcess`` with a timeout,
showing its output and verdict. Cancel stops the export (nothing is left behind) or kills
the check. CUDA is offered only when a device is found (the check runs once, on a worker).
Errors appear as non-modal message boxes over the dialog (``messages``), naming the
folder or node.
"""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QEvent, QProcess, Qt, QTimer
from PySide6.QtWidgets import (QButtonGroup, QCheckBox, QDialog, QFileDialog, QFormLayout, QHBoxLayout, QLabel,
                               QLineEdit, QMainWindow, QPlainTextEdit, QProgressBar, QPushButton, QRadioButton,
                               QVBoxLayout, QWidget)

from studio.gui import exporting, qt_dialogs


CHECK_TIMEOUT_MS = 600_000


class QtExportDialog(QDialog):
    """See the module docstring. ``state``: ``idle``, ``exporting``, ``checking`` or ``done``."""

    def __init__(self, window: QMainWindow, folder: str = "") -> None:
        super().__init__(window)
        self.setObjectName("exportDialog")
        self.setWindowTitle("Export module")
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.setWindowModality(Qt.WindowModality.WindowModal)
        self.window_, self.state, self.result, self.passed = window, "idle", None, None
        self.task = self.process = None
        self.messages: list = []
        self.check_timeout_ms = CHECK_TIMEOUT_MS
        self._build(folder or str(exporting.default_folder(window.session.model_path)))
        self._validate()
        exporting.find_gpu(self.window_, self._gpu_found)
        window.installEventFilter(self)            # the window closing closes this first (kills the check)

    # --- construction -----------------------------------------------------------------
    def _build(self, folder: str) -> None:
        self.cpu, self.cuda = QRadioButton("CPU (NumPy + numba)"), QRadioButton("CUDA (CuPy)")
        self.cpu.setChecked(True)
        self.cuda.setEnabled(False)
        self.backends = QButtonGroup(self)
        self.backends.addButton(self.cpu)
        self.backends.addButton(self.cuda)
        self.gpu_label = QLabel("looking for a CUDA device…")
        self.folder, self.browse = QLineEdit(folder), QPushButton("Browse…")
        self.name = QLineEdit(exporting.default_name(self.window_.session.model_name))
        self.message = QLabel(wordWrap=True)
        self.run_check = QCheckBox("Run the package's --check afterwards")
        self.run_check.setChecked(True)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1)
        self.verdict = QLabel(wordWrap=True)
        self.output = QPlainTextEdit(readOnly=True)
        self.output.setMinimumHeight(160)
        self.export_button, self.cancel_button = QPushButton("Export"), QPushButton("Close")
        self.export_button.setDefault(True)
        self._lay_out()
        self.folder.textChanged.connect(self._validate)
        self.name.textChanged.connect(self._validate)
        self.browse.clicked.connect(self._choose_folder)
        self.export_button.clicked.connect(self.start)
        self.cancel_button.clicked.connect(self.cancel)
        self.resize(620, 480)

    def _lay_out(self) -> None:
        backend = QVBoxLayout()
        for w in (self.cpu, self.cuda, self.gpu_label):
            backend.addWidget(w)
        where = QHBoxLayout()
        where.addWidget(self.folder, 1)
        where.addWidget(self.browse)
        form = QFormLayout()
        form.addRow("Backend:", _boxed(backend))
        form.addRow("Folder:", _boxed(where))
        form.addRow("Package name:", self.name)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.export_button)
        buttons.addWidget(self.cancel_button)
        col = QVBoxLayout(self)
        col.addLayout(form)
        for w in (self.message, self.run_check, self.progress, self.verdict, self.output):
            col.addWidget(w)
        col.addLayout(buttons)

    def _choose_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Export into folder", self.folder.text())
        if path:
            self.folder.setText(path)

    # --- validation and the GPU -------------------------------------------------------
    def _validate(self) -> bool:
        problem = exporting.target_problem(self.folder.text().strip(), self.name.text().strip())
        if problem:
            self.message.setText(problem)
            self.message.setStyleSheet("color: #b3261e")
        else:
            self.message.setText(exporting.target_note(self.folder.text().strip(), self.name.text().strip()))
            self.message.setStyleSheet("")
        self.export_button.setEnabled(problem is None and self.state in ("idle", "done"))
        return problem is None

    def _gpu_found(self, reason: str | None) -> None:
        self.cuda.setEnabled(reason is None and self.state in ("idle", "done"))
        self.cuda.setToolTip(reason or "")
        self.gpu_label.setText(f"CUDA is unavailable: {reason}" if reason else "A CUDA device is available")

    # --- exporting --------------------------------------------------------------------
    def target(self) -> Path:
        return Path(self.folder.text().strip()) / self.name.text().strip()

    def start(self) -> None:
        """Export to the chosen target (then check it); ignored while busy or invalid."""
        if self.state in ("exporting", "checking") or not self._validate():
            return
        session, target = self.window_.session, self.target()
        backend = "cuda" if self.cuda.isChecked() else "cpu"
        self.result = None
        self._set_state("exporting")
        self.output.clear()
        self.verdict.setText(f"Exporting to {target}…")
        self.task = self.window_.run_task(
            f"Exporting {target.name}", lambda token, progress: exporting.export_session(
                session, target, backend, token=token, progress=progress),
            context={"target": str(target)})
        self.task.progressed.connect(self._progress)
        self.task.succeeded.connect(self._exported)
        self.task.failed.connect(self._export_failed)
        self.task.cancelled.connect(self._export_cancelled)

    def _progress(self, done: int, total: int, what: str) -> None:
        self.progress.setRange(0, 0 if done == 0 else total)   # busy while the code is generated
        self.progress.setValue(done)
        self.verdict.setText(what)

    def _exported(self, result) -> None:
        self.task, self.result = None, result
        self.window_.settings.setValue("exportFolder", str(Path(result.path).parent))
        self.output.appendPlainText(f"wrote {result.path} ({result.kernels} generated kernels, "
                                    f"{len(result.files)} files)")
        if result.traffic is not None:                  # what the count says against what the module runs
            self.output.appendPlainText(result.traffic.summary())
        if self.run_check.isChecked():
            self._start_check()
        else:
            self._finish("Exported; check it with: cd "
                         f"{Path(result.path).parent} && python -m {result.package} --check")

    def _export_failed(self, message: str) -> None:
        self.task = None
        self._finish(f"The export failed: {message}")
        text = f"Could not export to {self.sender().context['target']}"
        self.window_.statusBar().showMessage(f"{text}: {message}", 10000)
        self.messages.append(qt_dialogs.show_error(self, "dcstudio", text, message))

    def _export_cancelled(self, _message: str) -> None:
        self.task = None
        self._finish("The export was cancelled; nothing was written")

    # --- the check --------------------------------------------------------------------
    def _start_check(self) -> None:
        program, args, cwd = exporting.check_command(self.result)
        self._set_state("checking")
        self.verdict.setText(f"Checking: python -m {self.result.package} --check …")
        self.process = p = QProcess(self)
        p.setWorkingDirectory(cwd)
        p.setProcessChannelMode(QProcess.ProcessChannelMode.MergedChannels)
        p.readyReadStandardOutput.connect(self._read_output)
        p.finished.connect(self._check_finished)
        p.errorOccurred.connect(self._check_error)
        self._timer = QTimer(self, singleShot=True, interval=self.check_timeout_ms)
        self._timer.timeout.connect(self._check_timed_out)
        self._timer.start()
        p.start(program, args)

    def _read_output(self) -> None:
        if self.process is not None:
            text = bytes(self.process.readAllStandardOutput().data()).decode("utf-8", "replace")
            self.output.moveCursor(self.output.textCursor().MoveOperation.End)
            self.output.insertPlainText(text)

    def _check_finished(self, code: int, status: QProcess.ExitStatus) -> None:
        self._read_output()
        self._timer.stop()
        crashed = status != QProcess.ExitStatus.NormalExit
        passed, line = exporting.verdict(None if crashed else code, self.output.toPlainText())
        self.passed = passed and not crashed
        self.process.deleteLater()
        self.process = None
        self._finish(line if not crashed or self.state != "stopping" else "The check was cancelled")

    def _check_error(self, error: QProcess.ProcessError) -> None:
        if error == QProcess.ProcessError.FailedToStart:
            self._timer.stop()
            self.process = None
            self._finish(f"The check could not start: {self.sender().errorString()}")

    def _check_timed_out(self) -> None:
        if self.process is not None:
            self.output.appendPlainText(f"\n[stopped: no verdict after {self.check_timeout_ms / 1000:g} s]")
            self._kill()

    def _kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.waitForFinished(5000)

    # --- state ------------------------------------------------------------------------
    def _set_state(self, state: str) -> None:
        self.state = state
        busy = state in ("exporting", "checking")
        for w in (self.cpu, self.folder, self.browse, self.name, self.run_check):
            w.setEnabled(not busy)
        self.cuda.setEnabled(not busy and exporting.gpu_known() and exporting.gpu_reason() is None)
        self.cancel_button.setText("Cancel" if busy else "Close")
        self.progress.setRange(0, 0 if busy else 1)
        self._validate()

    def _finish(self, line: str) -> None:
        if line:
            self.verdict.setText(line)
        self._set_state("done")
        self.progress.setValue(1 if self.result is not None else 0)

    def cancel(self) -> None:
        """Cancel the running export or check; close the dialog when nothing runs."""
        if self.state == "exporting" and self.task is not None:
            self.verdict.setText("Cancelling: the export stops after its current phase and leaves nothing")
            self.task.cancel()
        elif self.state == "checking":
            self.state = "stopping"
            self._kill()
        else:
            self.close()

    def eventFilter(self, watched, event) -> bool:
        if watched is self.window_ and event.type() == QEvent.Type.Close and self.isVisible():
            self.close()
        return False

    def closeEvent(self, event) -> None:
        if self.task is not None:
            self.task.cancel()                     # the worker removes what it wrote
        self._kill()
        super().closeEvent(event)

    def reject(self) -> None:                      # Escape: cancel first, close when idle
        if self.state in ("exporting", "checking"):
            self.cancel()
        else:
            super().reject()


def _boxed(layout) -> QWidget:
    w = QWidget()
    layout.setContentsMargins(0, 0, 0, 0)
    w.setLayout(layout)
    return w
