"""Opening a forward model: offer to generate its training step (DESIGN §5, way 1).

``QtTrainingDialog`` asks for the loss (and which forward output it applies to), the
optimizer, the learning rate, weight decay and (SGD) momentum, with the defaults of
``dcstudio train-graph``, and lists what would be trained and what kept constant (the
parameter plan of ``transforms.autodiff.plan``, for the default set: the model's
parameters; "Every float initializer" is the ``all`` set). Below it, every float initializer is a
checkable row (its size, and why the plan keeps it constant): checking or unchecking rows trains
exactly the checked ones (``trainable`` as a list of names). Its answers: **Generate training graph**
(``generate_requested``; ``options()`` are validated ``training_options``), **Open forward only**
(``"forward"``) and **Cancel** (``"cancel"``). It is non-blocking: the window connects ``chosen(str)``.
``offer_training`` shows it for a forward model the window just opened and acts on the answer: a
Generate starts a background open of the generated step while the dialog stays open — if generating
fails, the dialog says "could not generate the training step: …" and the user can change the choice
(the parameters to train, the loss output) and try again; once it opened, the dialog closes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (QComboBox, QDialog, QDialogButtonBox, QDoubleSpinBox, QFormLayout, QLabel,
                               QListWidget, QListWidgetItem, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget)

from ir.errors import StudioError
from studio.gui.loading import Opened, training_options
from transforms.autodiff.options import LOSSES, OPTIMIZERS, OptionError

LOSS_TEXT = {"cross_entropy": "Cross-entropy (integer class labels)", "mse": "Mean squared error"}
TRAINABLE_TEXT = {"parameters": "The model's parameters (listed below)",
                  "all": "Every float initializer (exporter constants too)",
                  "custom": "Only the initializers checked below"}
OPTIMIZER_TEXT = {"adamw": "AdamW", "sgd": "SGD (momentum)", "lion": "Lion", None: "None (gradients only)"}


def _spin(value: float, decimals: int, step: float, top: float = 1.0) -> QDoubleSpinBox:
    box = QDoubleSpinBox()
    box.setDecimals(decimals)
    box.setRange(0.0, top)
    box.setSingleStep(step)
    box.setValue(value)
    return box


@dataclass
class PlanChoices:
    """The parameter plans the dialog offers: the default plan's summary ``lines``, every float initializer
    the plan weighed (``names``, in model order, with sizes and the reason each one is kept constant), and
    the names each preset trains."""

    lines: list[str]
    names: list[str] = field(default_factory=list)
    numel: dict[str, int] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    presets: dict[str, frozenset[str]] = field(default_factory=dict)


class QtTrainingDialog(QDialog):
    """See the module docstring."""

    chosen = Signal(str)
    generate_requested = Signal()

    def __init__(self, model_name: str, outputs: list[str], parent: QWidget,
                 plan: PlanChoices | list[str] | None = None) -> None:
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
        choices = plan if isinstance(plan, PlanChoices) else PlanChoices(plan or ["(the parameter plan is not "
                                                                                  "available)"])
        self.choices = choices
        self.plan = _plan_view(choices.lines)
        self.parameters = self._parameter_list(choices)
        self.error = QLabel(wordWrap=True)
        self.error.setStyleSheet("color: #b3261e")
        form = QFormLayout()
        for label, w in (("Loss:", self.loss), ("Loss on output:", self.output), ("Optimizer:", self.optimizer),
                         ("Learning rate:", self.lr), ("Weight decay:", self.weight_decay),
                         ("Momentum:", self.momentum), ("Train:", self.trainable)):
            form.addRow(label, w)
        self._buttons()
        col = QVBoxLayout(self)
        for part in (intro, form, self.plan, self.parameters, self.error, self.buttons):
            (col.addLayout if isinstance(part, QFormLayout) else col.addWidget)(part)
        self.optimizer.currentIndexChanged.connect(self._optimizer_changed)
        self._optimizer_changed()
        self.trainable.currentIndexChanged.connect(self._preset_chosen)
        self.parameters.itemChanged.connect(self._checks_changed)
        self._preset_chosen()

    # --- the parameters to train -------------------------------------------------------------
    def _parameter_list(self, choices: PlanChoices) -> QListWidget:
        view = QListWidget()
        view.setObjectName("trainableParameters")
        view.setMaximumHeight(view.fontMetrics().lineSpacing() * 8)
        view.setToolTip("Check the initializers to train; the others stay constant")
        for name in choices.names:
            item = QListWidgetItem(f"{name}  ({choices.numel.get(name, 0):,} values)")
            item.setData(Qt.ItemDataRole.UserRole, name)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(Qt.CheckState.Unchecked)
            item.setToolTip(choices.reasons.get(name, ""))
            view.addItem(item)
        view.setVisible(bool(choices.names))
        return view

    def checked(self) -> list[str]:
        """The checked initializers, in model order."""
        items = (self.parameters.item(k) for k in range(self.parameters.count()))
        return [it.data(Qt.ItemDataRole.UserRole) for it in items if it.checkState() == Qt.CheckState.Checked]

    def _preset_chosen(self) -> None:
        """A preset checks the names it trains (Custom keeps the checks as they are)."""
        names = self.choices.presets.get(self.trainable.currentData())
        if names is None:
            return
        self.parameters.blockSignals(True)
        for k in range(self.parameters.count()):
            item = self.parameters.item(k)
            on = item.data(Qt.ItemDataRole.UserRole) in names
            item.setCheckState(Qt.CheckState.Checked if on else Qt.CheckState.Unchecked)
        self.parameters.blockSignals(False)

    def _checks_changed(self, _item=None) -> None:
        """Checks that match a preset select it; any other set is Custom."""
        mine = frozenset(self.checked())
        key = next((k for k, names in self.choices.presets.items() if names == mine), "custom")
        self.trainable.blockSignals(True)
        self.trainable.setCurrentIndex(self.trainable.findData(key))
        self.trainable.blockSignals(False)

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
        trainable = self.trainable.currentData()
        if trainable == "custom":
            trainable = tuple(self.checked())
            if not trainable:
                raise OptionError("no parameter is checked: check the initializers to train")
        return training_options(self.loss.currentData(), self.optimizer.currentData(), self.lr.value(),
                                self.weight_decay.value(), self.momentum.value(),
                                output if outputs and output != outputs[0] else None, trainable)

    def _generate(self) -> None:
        try:
            self.options()
        except StudioError as e:
            self.error.setText(e.summary)
            return
        self.error.setText("generating the training step…")
        self.generate_button.setEnabled(False)
        self.generate_requested.emit()

    def generation_failed(self, message: str) -> None:
        """Generating (or opening) the step failed: say why and let the user change the choice."""
        self.error.setText(f"could not generate the training step: {message}")
        self.generate_button.setEnabled(True)

    def generated(self) -> None:
        """The generated step opened: close."""
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


def parameter_plan(path: str) -> PlanChoices:
    """The parameter plans of the forward model ``path`` for the dialog (or why there are none)."""
    from ir.onnx_load import read_model
    from transforms.autodiff.training_graph import plan_parameters
    try:
        model = read_model(path)
        default = plan_parameters(model, optimizer=None)
        every = plan_parameters(model, optimizer=None, trainable="all")
    except StudioError as e:
        return PlanChoices([f"cannot list the parameters: {e.summary}"])
    names = list(dict.fromkeys([*every.trained, *every.reasons, *default.trained, *default.reasons]))
    return PlanChoices(default.lines(shown=40), names, {**every.numel, **default.numel},
                       {n: default.reasons.get(n, every.reasons.get(n, "")) for n in names},
                       {"parameters": frozenset(default.trained), "all": frozenset(every.trained)})


class _Offer:
    """What the window does with the answer of a ``QtTrainingDialog`` (see ``offer_training``)."""

    def __init__(self, window, path: str, opened: Opened, dialog: QtTrainingDialog) -> None:
        self.window, self.path, self.opened, self.dialog = window, path, opened, dialog

    def __call__(self, choice: str) -> None:
        if choice == "forward":
            self.window.show_opened(self.path, self.opened)
        self.dialog = self.opened = None

    def generate(self) -> None:
        """Open the generated step in the background; the dialog closes when it opened, or says why not."""
        task = self.window.open_model(self.path, training=self.dialog.options())
        task.failed.disconnect(self.window._task_failed)          # the dialog says it, and stays open
        task.failed.connect(self.dialog.generation_failed)
        task.succeeded.connect(self.dialog.generated)


def offer_training(window, path: str, opened: Opened) -> QtTrainingDialog:
    """Ask how to open the forward model ``path`` (already imported as ``opened``); returns the dialog."""
    forward = opened.session
    dialog = QtTrainingDialog(forward.model_name, list(forward.graph.outputs), window, parameter_plan(path))
    dialog.offer = _Offer(window, path, opened, dialog)
    dialog.chosen.connect(dialog.offer)
    dialog.generate_requested.connect(dialog.offer.generate)
    window.training_dialog = dialog
    dialog.open()
    return dialog
