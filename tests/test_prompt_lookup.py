"""The n-gram drafter of prompt lookup decoding."""

from __future__ import annotations

from specviz.methods.prompt_lookup import ngram_continuation


def test_longest_suffix_wins_and_the_most_recent_match_is_copied():
    ids = [1, 2, 3, 9, 9, 7, 2, 3, 4, 5, 6, 1, 2, 3]
    # suffix (1, 2, 3) occurred at the start, followed by 9 9 7
    assert ngram_continuation(ids, 3, 3, 1) == ([9, 9, 7], 3)
    # with bigrams only, the most recent (2, 3) is at index 6, followed by 4 5
    assert ngram_continuation(ids, 2, 2, 1) == ([4, 5], 2)


def test_backs_off_to_shorter_ngrams_and_gives_up_cleanly():
    assert ngram_continuation([4, 8, 5, 6, 8], 2, 3, 1) == ([5, 6], 1)
    assert ngram_continuation([1, 2, 3], 4, 3, 1) == ([], 0)
    assert ngram_continuation([7], 4, 3, 1) == ([], 0)
    assert ngram_continuation([4, 8, 5, 6, 8], 2, 3, 2) == ([], 0)  # min_ngram 2: no unigram fallback


def test_continuation_is_cut_at_the_end_of_the_text():
    assert ngram_continuation([5, 5, 5], 4, 1, 1) == ([5], 1)
