"""EAGLE (Li et al. 2024): a draft head that reads the target's own features.

The target's second-to-top features f_t (the hidden state its LM head reads) are more predictable
than its tokens: one decoder layer, fed f_t and the embedding of token t+1, predicts f_{t+1}, and
the target's own LM head turns that into the next token (EAGLE-1's feature regression plus token
loss). EAGLE-2 drafts a tree whose shape follows the head's confidence (`specviz.methods.eagle`).

- `specviz.models.eagle`: the head (`EagleHead`), built from the target's top layer, saved and loaded (<= 20 MB)
- `features`: the target's features by teacher-forced prefill over the corpus, in fp16 chunks
- `train`: the resumable trainer (`python -m specviz.eagle.train`) and its held-out validation
"""
