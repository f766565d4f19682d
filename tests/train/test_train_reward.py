import pytest

from datamind.agent.protocol import cut_at_stop, final_answer, format_ok
from datamind.agent.protocol import strict_turn as parse_turn
from datamind.train.config import RewardConfig
from datamind.train.reward import MatchJudge, combine_reward, length_factor, score, void_turns


@pytest.mark.parametrize(
    "length, expected",
    [(0, 1.0), (256, 1.0), (257, 767 / 768 * 0.5 + 0.5), (640, 0.75), (1024, 0.5), (1025, 0.5), (10_000, 0.5)],
)
def test_length_factor(length, expected):
    assert length_factor(length, 256, 1024) == pytest.approx(expected)


@pytest.mark.parametrize(
    "r_format, r_answer, r_length, expected",
    [(1, 1, 0.75, 0.75), (0, 1, 0.75, 0.75), (1, 0, 0.75, 0.0), (0, 0, 1.0, -0.1)],
)
def test_combine_reward(r_format, r_answer, r_length, expected):
    assert combine_reward(r_format, r_answer, r_length) == pytest.approx(expected)


GOOD_CODE = {"role": "assistant", "content": "<think>look</think>\n<code>\nprint(1)\n</code>"}
OBS = {"role": "tool", "content": "<interpreter>\n1\n</interpreter>"}


def answer(text, think=True):
    return {"role": "assistant", "content": ("<think>done</think>" if think else "") + f"<answer>{text}</answer>"}


def words(text):
    return len(text.split())


def test_score_cases():
    judge, cfg = MatchJudge(), RewardConfig(l_min=2, l_max=6)
    ok = score([GOOD_CODE, OBS, answer("6")], "q", "6", judge, words, cfg)
    assert (ok.reward, ok.r_format, ok.r_answer, ok.length) == (1.0, 1, 1, 1)
    wrong = score([GOOD_CODE, OBS, answer("7")], "q", "6", judge, words, cfg)
    assert wrong.reward == 0.0 and wrong.r_format == 1
    broken = score([GOOD_CODE, OBS, answer("7", think=False)], "q", "6", judge, words, cfg)
    assert broken.reward == pytest.approx(-0.1) and broken.r_format == 0
    # A correct answer of 4 words with l_min 2, l_max 6: (6 - 4) / 4 * 0.5 + 0.5 = 0.75
    verbose = score([answer("it is 6 units")], "q", "6", judge, words, cfg)
    assert verbose.r_answer == 1 and verbose.length == 4 and verbose.reward == pytest.approx(0.75)
    hedged = score([answer("maybe 5 or 6")], "q", "6", judge, words, cfg)
    assert hedged.r_answer == 0 and hedged.reward == 0.0  # listing candidates does not match
    no_answer = score([GOOD_CODE, OBS], "q", "6", judge, words, cfg)
    assert no_answer.reward == pytest.approx(-0.1)


def test_score_response_length_basis():
    cfg = RewardConfig(l_min=2, l_max=6, length_basis="response")
    r = score([GOOD_CODE, OBS, answer("6")], "q", "6", MatchJudge(), words, cfg)
    assert r.length == words(GOOD_CODE["content"]) + words(answer("6")["content"])


@pytest.mark.parametrize(
    "pred, truth, expected",
    [
        ("6", "6", True),
        ("The final answer is 6.", "6", True),
        ("6.0", "6", True),
        ("North", "north", True),
        ("0.33333", "0.333333", True),
        ("102.9", "100", True),  # the paper's 3 % rule
        ("103.5", "100", False),
        ("25%", "0.25", True),
        ("1,234", "1234", True),
        ("12%", "12", True),
        ("1, 2, 6", "6", False),
        ("six", "6", False),
        ("", "6", False),
        ("south", "north", False),
    ],
)
def test_match_judge(pred, truth, expected):
    assert MatchJudge()("q", pred, truth) is expected


@pytest.mark.parametrize(
    "text, code, ans, well_formed, void",
    [
        ("<think>a</think><code>print(1)</code>", "print(1)", None, True, False),
        ("<think>a</think><code>\n```python\nx = 1\n```\n</code>", "x = 1", None, True, False),
        ("<think>a</think><answer>42</answer>", None, "42", True, False),
        ("<think>a</think><code>print(</code>", "print(", None, True, True),  # syntax error: void
        ("<think>a</think>", None, None, False, True),
        ("<think>a</think><answer> </answer>", None, " ", True, True),
        ("chatter <code>print(2)</code>", "print(2)", None, False, False),
        ("<code>x=1</code><answer>1</answer>", "x=1", None, False, False),  # code closes first
        ("\x00\x01 garbage", None, None, False, True),
    ],
)
def test_parse_turn(text, code, ans, well_formed, void):
    t = parse_turn(text)
    assert (t.code, t.answer, t.well_formed, t.is_void) == (code, ans, well_formed, void)


def test_format_ok_rules():
    assert format_ok([GOOD_CODE, OBS, answer("1")])
    assert not format_ok([GOOD_CODE, OBS])  # no answer at the end
    assert not format_ok([answer("1"), OBS, answer("1")])  # an answer before the last turn
    assert not format_ok([GOOD_CODE, {"role": "tool", "content": "1"}, answer("1")])  # unwrapped output
    assert not format_ok([])


def test_cut_and_final_answer_and_void_count():
    assert cut_at_stop("<code>a</code> trailing <answer>") == "<code>a</code>"
    assert cut_at_stop("no stop") == "no stop"
    assert cut_at_stop("<think>x</think><code>print(1)\n<interpreter>\n1") == "<think>x</think><code>print(1)\n"
    assert final_answer([GOOD_CODE, OBS, answer("x")]) == "x"
    assert final_answer([GOOD_CODE]) is None
    assert void_turns([GOOD_CODE, OBS, {"role": "assistant", "content": "hmm"}]) == 1
