"""Hugging Face `transformers.Trainer` under spotvisor: a save on every notice.

    from spotvisor_helper import SignalFlags
    signals = SignalFlags()                   # first line: SIGTERM and SIGUSR1 kept from here on
    ...                                       # import torch, transformers (seconds)
    from spotvisor_helper.hf import SpotvisorCallback
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[SpotvisorCallback(signals)])
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)

(This module imports transformers, which takes seconds: a notice during them would kill a
process whose handlers are not yet installed, so make the flags before.)

with, in the job file, `resume_args: ["--resume_from_checkpoint", "{checkpoint}"]` and
`checkpoints.dir` the Trainer's `output_dir` (pattern `checkpoint-{step}`, the default).

Trainer installs no signal handler, so without this a notice's SIGTERM kills the training and
the steps since the last `save_steps` are lost. At the end of every step the callback agrees
the flags across ranks (`SignalFlags.agree()`, an all-reduce when torch.distributed runs, so
every rank saves the same step): a checkpoint request (SIGUSR1) sets `control.should_save`;
a stop (SIGTERM) sets `should_save` and `should_training_stop`, so the Trainer writes
`checkpoint-N` (trainer_state.json last, which spotvisor checks) and `train()` returns.

Importing `spotvisor_helper` never imports transformers; importing this module without it
installed fails with a message that says what to install.
"""

from __future__ import annotations

from typing import Any, Optional

try:
    from transformers import TrainerCallback
except ImportError as e:  # pragma: no cover - exercised by the test without transformers
    raise ImportError(
        "spotvisor_helper.hf needs Hugging Face transformers (pip install transformers); "
        f"importing it failed: {e}"
    ) from e

from .signals import SignalFlags


class SpotvisorCallback(TrainerCallback):
    """Saves on spotvisor's checkpoint signal, saves and stops on its stop signal.

    Pass the `SignalFlags` made at the top of the script (else it makes one now, after the
    imports) and give it to the Trainer in `callbacks=[...]`. SIGTERM = stop, SIGUSR1 =
    checkpoint, as spotvisor's `signals.on_notice` / `signals.checkpoint`.
    """

    def __init__(self, signals: Optional[SignalFlags] = None) -> None:
        self.signals = signals if signals is not None else SignalFlags()
        self.saves_requested = 0  # steps at which a signal asked for a save (for logs and tests)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        stop, requested = self.signals.agree()  # on every rank: all save the same step
        if stop or requested:
            control.should_save = True
            self.saves_requested += 1
        if stop:
            control.should_training_stop = True
        return control

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self.signals.clear_checkpoint()  # a stop stays set; a newer request asks again
        return control
