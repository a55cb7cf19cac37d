"""Online Speculative Decoding (Liu et al. 2023): the draft is distilled online from the queries it serves.

- `losses`: forward KL, reverse KL and JSD[beta] between the target p and the draft q.
- `buffers`: what one request leaves behind (R) and the capped replay buffer across requests (Q).
- `learner`: `OnlineLearner`, a serving copy and a trainee copy of the draft; updates every I requests.
- `analysis`: which tokens the draft learned (precision / recall per token, the paper's Figure 6).

The serving simulator (a stream of requests served by the `osd` method) runs the method, so it is
not here: `specviz.serving.stream`.
"""
