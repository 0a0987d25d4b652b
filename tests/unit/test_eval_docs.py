"""The document question set's runner (bench/eval_docs.py): its scoring, what counts as relevant, the question file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import eval_docs
from bench.common import Figure

pytestmark = pytest.mark.unit


def test_scores_are_top3_reciprocal_rank_and_recall_at_10():
    # Given a ranking whose 4th and 6th results are relevant, out of 3 relevant chunks
    ranked = [False, False, False, True, False, True] + [False] * 4
    # Then it misses the top 3, its reciprocal rank is 1/4, and it found 2 of 3
    assert eval_docs.score(ranked, 3) == {"top3": 0.0, "mrr10": 0.25, "recall10": pytest.approx(2 / 3)}
    assert eval_docs.score([True] + [False] * 9, 1) == {"top3": 1.0, "mrr10": 1.0, "recall10": 1.0}
    # And recall is over at most 10 relevant chunks; a question no chunk answers scores 0
    assert eval_docs.score([True] * 10 + [True], 40)["recall10"] == 1.0
    assert eval_docs.score([], 0) == {"top3": 0.0, "mrr10": 0.0, "recall10": 0.0}


def test_a_chunk_is_relevant_when_it_holds_every_answer_string_whatever_the_case_and_line_breaks():
    assert eval_docs.relevant("comments on this proposed AD by September 21,\n2020.", ["September 21, 2020"])
    assert eval_docs.relevant("| Berries | Blueberry | 150 |", ["berries", "150"])
    assert not eval_docs.relevant("| Berries | Blueberry |", ["Berries", "150"])


def test_the_question_set_covers_every_shared_document_with_at_least_60_questions():
    questions = json.loads(eval_docs.QUESTIONS_PATH.read_text())["questions"]
    assert len(questions) >= 60
    assert len({q["id"] for q in questions}) == len(questions)
    covered = {f for q in questions for f in q["files"]}
    assert covered == set(eval_docs.files())
    kinds = {k for q in questions for k in q["kinds"]}
    assert kinds >= {"table", "number", "heading", "paraphrase", "spanish", "distractor"}
    assert all(q["answer"] and all(isinstance(a, str) and a for a in q["answer"]) for q in questions)


def test_folding_replaces_only_this_sections_figures(tmp_path: Path):
    path = tmp_path / "results.json"
    path.write_text(
        json.dumps(
            {
                "figures": [{"name": "other", "section": "ingest"}, {"name": "old", "section": eval_docs.SECTION}],
                "machine": {"x": 1},
            }
        )
    )
    eval_docs.fold_into_results([Figure("docs_top3_hybrid_both", 0.9, "score", section=eval_docs.SECTION)], path)
    folded = json.loads(path.read_text())
    assert [f["name"] for f in folded["figures"]] == ["other", "docs_top3_hybrid_both"]
    assert folded["machine"] == {"x": 1}
