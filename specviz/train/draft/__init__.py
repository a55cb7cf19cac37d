"""Distil the draft from the teacher corpus: a small Llama with a reduced-vocabulary head.

    python -m specviz.train.draft --target default --data ../shared/data --work runs/corpus \
        --out assets/drafts/smollm2-135m-draft --steps 3000

Data: the target's answers of the teacher corpus (`specviz.train.corpus`): the shipped token ids
(`assets/corpus/`) plus a generation work folder's answers, whose top-k log-probabilities are kept
there. Loss per answer position, forward KL to the target as far as the data tells it:
cross-entropy to p renormalised on the head's tokens among its stored top-k, or, where only the
answer is known, to the answer token (for greedy answers that is the target's argmax: sequence-level
distillation). Held-out prompts (`corpus.held_out`, `specviz.train.splits.CORPUS`) give the
validation: agreement of the draft's argmax with the target's greedy answer token, the acceptance
rate of greedy speculative decoding on those answers.

The draft (`specviz.models.draft.ReducedVocabDraft`): the head scores the K most frequent answer
tokens of the training split, its input table is the target's embedding projected on its top
principal axes, the head starts from the same projection of those K tokens' embeddings.
Training is seeded, checkpoints every few minutes and resumes from its last checkpoint; `--init`
starts from a shipped draft instead (a later session continues a run without its optimiser state).

- `data`: the corpus's answers with their prompts, split, batched, collated into sparse targets.
- `start`: the draft's shape, head vocabulary and first weights (fresh or cut from the target).
- `fit`: the loss, the schedule, validation, training through `specviz.train.loop`.
- `export`: the draft folder and its MODEL_CARD.md.
- `cli`: the command line.
"""

from specviz.train.draft.cli import main
from specviz.train.draft.data import CorpusData, Example, collate
from specviz.train.draft.fit import TrainConfig, distillation_loss, train, validate
from specviz.train.draft.start import DraftShape, choose_vocab, new_draft, subclone_draft

__all__ = [
    "CorpusData",
    "DraftShape",
    "Example",
    "TrainConfig",
    "choose_vocab",
    "collate",
    "distillation_loss",
    "main",
    "new_draft",
    "subclone_draft",
    "train",
    "validate",
]
