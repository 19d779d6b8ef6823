"""Opening a forward model: offer to generate its training step (DESIGN §5, way 1).

``QtTrainingDialog`` asks for the loss (and which forward output it applies to), the
optimizer, the learning rate, weight decay and (SGD) momentum, with the defaults of
``dcstudio train-graph``, and lists what would be trained and what kept constant (the
parameter plan of ``transforms.autodiff.plan``, for the default set: the model's
parameters; "Every float initializer" is the ``all`` set). Its three answers: **Generate training graph** (``choice`` =
``"generate"``, ``options()`` are validated ``training_options``), **Open forward only**
(``"forward"``) and **Cancel** (``"cancel"``). It is non-blocking: the window connects
``chosen(str)``. ``offer_training`` shows it for a forward model the window just opened
and acts on the answer: open the generated step (a new background open), show the forward
session, or keep what the window showed.
"""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (QComboBox, QDialog, QDialogButtonBox, QDoubleSpinBox, QFormLayout, QLabel,
                               QPlainTextEdit, QPushButton, QVBoxLayout, QWidget)

from ir.errors import StudioError
from studio.gui.loading import Opened, training_options
from transforms.autodiff.options import LOSSES, OPTIMIZERS

LOSS_TEXT = {"cross_entropy": "Cross-entropy (integer class labels)", "mse": "Mean squared error"}
TRAINABLE_TEXT = {"parameters": "The model's parameters (listed below)",
                  "all": "Every float initializer (exporter constants too)"}
OPTIMIZER_TEXT = {"adamw": "AdamW", "sgd": "SGD (momentum)", "lion": "Lion", None: "None (gradients only)"}


def _spin(value: float, decimals: int, step: float, top: float = 1.0) -> QDoubleSpinBox:
    box = QDoubleSpinBox()
    box.setDecimals(decimals)
    box.setRange(0.0, top)
    box.setSingleStep(step)
    box.setValue(value)
    return box


class QtTrainingDialog(QDialog):
    """See the module docstring."""

    chosen = Signal(str)

    def __init__(self, model_name: str, outputs: list[str], parent: QWidget, plan: list[str] | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("trainingDialog")
        self.setWindowTitle("Generate training graph")
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.setWindowModality(Qt.WindowModality.WindowModal)
        self.choice = "cancel"
        self.intro = intro = QLabel(f"<b>{model_name}</b> is a forward model: it has no gradients and no optimizer. "
                       "dcstudio can generate its training step (forward, loss, backward and the optimizer "
                       "update) and open that, or open the forward pass as it is.", wordWrap=True)
        self.loss, self.output, self.optimizer = QComboBox(), QComboBox(), QComboBox()
        for key in LOSSES:
            self.loss.addItem(LOSS_TEXT.get(key, key), key)
        self.output.addItems(outputs)
        for key in (*OPTIMIZERS, None):
            self.optimizer.addItem(OPTIMIZER_TEXT.get(key, str(key)), key)
        self.optimizer.setCurrentIndex(self.optimizer.findData("adamw"))
        self.lr = _spin(1e-3, 6, 1e-4)
        self.weight_decay = _spin(0.0, 4, 1e-3)
        self.momentum = _spin(0.9, 3, 0.05, 0.999)
        self.trainable = QComboBox()
        for key, text in TRAINABLE_TEXT.items():
            self.trainable.addItem(text, key)
        self.plan = _plan_view(plan or ["(the parameter plan is not available)"])
        self.error = QLabel(wordWrap=True)
        self.error.setStyleSheet("color: #b3261e")
        form = QFormLayout()
        for label, w in (("Loss:", self.loss), ("Loss on output:", self.output), ("Optimizer:", self.optimizer),
                         ("Learning rate:", self.lr), ("Weight decay:", self.weight_decay),
                         ("Momentum:", self.momentum), ("Train:", self.trainable)):
            form.addRow(label, w)
        self._buttons()
        col = QVBoxLayout(self)
        for part in (intro, form, self.plan, self.error, self.buttons):
            (col.addLayout if isinstance(part, QFormLayout) else col.addWidget)(part)
        self.optimizer.currentIndexChanged.connect(self._optimizer_changed)
        self._optimizer_changed()

    def _buttons(self) -> None:
        self.buttons = QDialogButtonBox()
        self.generate_button = QPushButton("Generate training graph")
        self.generate_button.setDefault(True)
        self.forward_button = QPushButton("Open forward only")
        self.cancel_button = self.buttons.addButton(QDialogButtonBox.StandardButton.Cancel)
        self.buttons.addButton(self.generate_button, QDialogButtonBox.ButtonRole.AcceptRole)
        self.buttons.addButton(self.forward_button, QDialogButtonBox.ButtonRole.ActionRole)
        self.generate_button.clicked.connect(self._generate)
        self.forward_button.clicked.connect(lambda: self._answer("forward"))
        self.cancel_button.clicked.connect(self.reject)

    def _optimizer_changed(self) -> None:
        opt = self.optimizer.currentData()
        self.momentum.setEnabled(opt == "sgd")
        self.weight_decay.setEnabled(opt in ("adamw", "lion", "sgd"))
        self.lr.setEnabled(opt is not None)

    def options(self) -> dict:
        """The chosen options, validated (raises ``OptionError`` naming the bad option)."""
        outputs = [self.output.itemText(k) for k in range(self.output.count())]
        output = self.output.currentText()
        return training_options(self.loss.currentData(), self.optimizer.currentData(), self.lr.value(),
                                self.weight_decay.value(), self.momentum.value(),
                                output if outputs and output != outputs[0] else None, self.trainable.currentData())

    def _generate(self) -> None:
        try:
            self.options()
        except StudioError as e:
            self.error.setText(e.summary)
            return
        self._answer("generate")

    def _answer(self, choice: str) -> None:
        self.choice = choice
        self.accept()

    def done(self, result: int) -> None:
        if result == QDialog.DialogCode.Rejected:
            self.choice = "cancel"
        super().done(result)
        self.chosen.emit(self.choice)


def _plan_view(lines: list[str]) -> QPlainTextEdit:
    view = QPlainTextEdit("\n".join(lines))
    view.setObjectName("parameterPlan")
    view.setReadOnly(True)
    view.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
    view.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
    view.setMaximumHeight(view.fontMetrics().lineSpacing() * 9)
    return view


def parameter_plan(path: str) -> list[str]:
    """The default parameter plan of the forward model ``path`` as lines (or why there is none)."""
    from ir.onnx_load import read_model
    from transforms.autodiff.training_graph import plan_parameters
    try:
        return plan_parameters(read_model(path), optimizer=None).lines(shown=40)
    except StudioError as e:
        return [f"cannot list the parameters: {e.summary}"]


class _Offer:
    """What the window does with the answer of a ``QtTrainingDialog`` (see ``offer_training``)."""

    def __init__(self, window, path: str, opened: Opened, dialog: QtTrainingDialog) -> None:
        self.window, self.path, self.opened, self.dialog = window, path, opened, dialog

    def __call__(self, choice: str) -> None:
        if choice == "generate":
            self.window.open_model(self.path, training=self.dialog.options())
        elif choice == "forward":
            self.window.show_opened(self.path, self.opened)
        self.dialog = self.opened = None


def offer_training(window, path: str, opened: Opened) -> QtTrainingDialog:
    """Ask how to open the forward model ``path`` (already imported as ``opened``); returns the dialog."""
    forward = opened.session
    dialog = QtTrainingDialog(forward.model_name, list(forward.graph.outputs), window, parameter_plan(path))
    dialog.offer = _Offer(window, path, opened, dialog)
    dialog.chosen.connect(dialog.offer)
    window.training_dialog = dialog
    dialog.open()
    return dialog
