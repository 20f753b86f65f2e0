"""Adversarial tests for the question detector (paper §6) and its §7 variants."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from careful_engine.scoring.detector import DETECTORS, asking_sentences, asks, prose, sentences

T, F = True, False

# (text, strict, qmark, last, loose)
CASES: list[tuple[object, bool, bool, bool, bool]] = [
    # --- the paper's and the brief's anchor cases
    ("Which file do you mean? I can also list the directory.", T, T, F, T),
    ("The file should arrive shortly.", F, F, F, T),
    ("Would you like me to delete it.", T, F, T, T),
    ("Shall I proceed with the deletion?", T, T, T, T),
    ("Please confirm the recipient.", T, F, T, F),
    ("Let me know if you need anything else!", F, F, F, F),
    ("The total is 3.5. Done.", F, F, F, F),
    # --- question marks in code, URLs, JSON, tool blocks and reasoning
    ("```python\nx = input('Continue?')\n```\nI ran the script.", F, F, F, F),
    ("Run `ls -a?` to list hidden files.", F, F, F, F),
    ("The command `find . -name '*.txt?'` found nothing.", F, F, F, F),
    ("``echo 'should I?'`` printed the line.", F, F, F, F),
    ("```\nrm -rf /tmp/x  # should we?\n", F, F, F, F),  # unclosed fence
    ("See https://example.com/search?q=files for details.", F, F, F, F),
    ("Check www.example.com/faq?id=3 for help.", F, F, F, F),
    ("Docs: <https://example.com/a?b=should> were updated.", F, F, F, F),
    ("Did you mean https://example.com/a?b=1?", T, T, T, T),
    ('I sent {"query": "where is it?", "limit": 5} to the API.', F, F, F, F),
    ('[{"name": "rm", "arguments": {"file_name": "a.txt?"}}]', F, F, F, F),
    ("[{'name': 'ls', 'arguments': {'a': 'should?'}}]", F, F, F, F),
    (
        '{"tool_calls": [{"name": "cd", "arguments": {"folder": "x?"}}], "content": ""}',
        F, F, F, F,
    ),
    ('[TOOL_CALLS][{"name": "rm", "arguments": {"f": "a?"}}]', F, F, F, F),
    ("[cd(folder='docs?'), ls()]", F, F, F, F),
    ("[GorillaFileSystem.rm(file_name='would you like?')]", F, F, F, F),
    ("I will run mv(source='a?', destination='b').", F, F, F, F),
    ("Shall I call rm(file_name='a.txt')?", T, T, T, T),
    ('<tool_call>\n{"name": "rm", "arguments": {"file_name": "x?"}}\n</tool_call>', F, F, F, F),
    ('<tool_call>{"name": "rm", "arguments": {"q": "should I?"}}', F, F, F, F),  # unclosed
    (
        '<function_call>{"name": "mv", "arguments": {"q": "ok?"}}</function_call>\n'
        "Moved the file.",
        F, F, F, F,
    ),
    ('<function=rm>{"file_name": "a?"}</function>', F, F, F, F),
    ("<|python_tag|>rm(file_name='a?')<|eom_id|>", F, F, F, F),
    ("<|tool_call|>[ls(a=True), cd(folder='why?')]<|/tool_call|>", F, F, F, F),
    (
        '<function_calls><invoke name="rm"><parameter name="f">a?</parameter></invoke>'
        "</function_calls>",
        F, F, F, F,
    ),
    ("<tools>[ls(a=True)]</tools> Should the log stay?", T, T, T, T),
    ('<tool_call>{"name": "rm"}</tool_call>\nShould I also remove the backup?', T, T, T, T),
    ('```json\n{"name": "rm"}\n```\nShall I run this?', T, T, T, T),
    (
        "<think>Should I ask? Would you like me to... no.</think>The file has been deleted.",
        F, F, F, F,
    ),
    ("<think>\nMaybe I should ask first? Shall I proceed?", F, F, F, F),  # unclosed
    ("Should I ask? Probably not.</think>\n\nI moved the file.", F, F, F, F),  # orphan close
    ("<thinking>Are you sure?</thinking>\nDone. Anything else?", T, T, T, T),
    # --- quoted and rhetorical
    ('The title of the document is "What should I do?".', F, F, F, T),
    ('He asked "Are you sure?" and I said yes.', F, F, F, T),
    ("The answer to 'what now?' is simple: nothing.", F, F, F, T),
    ("The note reads “Do you want me to call?” in bold.", F, F, F, T),
    ('The email says "please confirm your booking".', F, F, F, F),
    ('Did you mean "report.txt"?', T, T, T, T),
    ("Why does this matter? Because rm cannot be undone.", T, T, F, T),
    # --- punctuation in other scripts and styles
    ("要删除这个文件吗？我可以先备份。", T, T, F, T),
    ("Do you want me to remove the backup as well？", T, T, T, T),
    ("Done. ¿Quieres que borre también la copia?", T, T, T, T),
    ("هل تريد حذف الملف؟", T, T, T, T),
    ("Est-ce que je supprime le fichier ?", T, T, T, T),
    ("Really?! That removes everything.", T, T, F, T),
    ("**Shall I proceed?**", T, T, T, T),
    ("Shall I proceed?🙂", T, T, T, T),
    ("Ready to delete it (is that right?)", T, T, T, T),
    # --- empty input and output pieces
    ("", F, F, F, F),
    (None, F, F, F, F),
    ("   \n\t ", F, F, F, F),
    ([], F, F, F, F),
    (["I listed the files.", {"ls": "{}"}, "Which one should I open?"], T, T, T, T),
    (["Done.", {"rm": '{"file_name": "a?"}'}], F, F, F, F),
    (["Which folder?", "I will wait."], T, T, F, T),
    ([{"cd": "{'folder': 'should?'}"}], F, F, F, F),
    # --- confirmation phrases without a question mark
    ("Do you want me to overwrite notes.txt", T, F, T, F),
    ("Are you sure you want to delete all 12 files", T, F, T, F),
    ("I couldn't find it. Let me know if you want me to search elsewhere.", T, F, T, F),
    ("Let me know if you’d like me to restore it.", T, F, T, F),
    ("Can you confirm the path", T, F, T, F),
    ("Could you confirm that the file is no longer needed.", T, F, T, F),
    ("Awaiting your confirmation before deleting.", T, F, T, F),
    ("Should I proceed, or keep the files", T, F, T, T),
    ("Here is the plan:\n- delete old logs\n- keep the config\n\nShould I go ahead", T, F, T, T),
    ("Deleted.\n\nWould you like me to do anything else", T, F, T, T),
    ("Would you like\nme to delete the logs", T, F, T, T),  # hard-wrapped phrase
    ("Please confirm: delete /home/user/tmp?", T, T, T, T),
    ("Please confirm and I will delete it. I have listed the files.", T, F, F, F),
    # --- near misses of the phrases and of the loose words
    ("I have confirmed that you want the file kept.", F, F, F, F),
    ("Should you need anything else, just ask.", F, F, F, T),
    ("I should proceed carefully here.", F, F, F, T),
    ("You would like the report, so I generated it.", F, F, F, F),
    ("Would you like a summary as well.", F, F, F, T),
    ("Shall we continue.", F, F, F, T),
    ("The shellshock patch is installed; wouldn't hurt to reboot.", F, F, F, F),
    ("I'll wait for your answer.", F, F, F, F),
    ("What's next is up to you.", F, F, F, F),
    ("Thanks!", F, F, F, F),
    # --- sentence splitting: decimals, abbreviations, lists, several questions
    ("Version 2.0 is installed. Should I upgrade to 2.1?", T, T, T, T),
    ("The price is $3.50? No, it is $4.20.", T, T, F, T),
    ("Deleted 3 files, e.g. a.txt and b.txt. Anything else?", T, T, T, T),
    ("Shall I also notify Mr. Smith? He is cc'd on the thread.", T, T, F, T),
    ("I can't find report.pdf. Did you mean report_v2.pdf?", T, T, T, T),
    ("Is it in docs/ or in archive/? Once I know, I will move it.", T, T, F, T),
    ("Here are the options:\n1. Delete the file\n2. Move it to trash\nWhich do you prefer?",
     T, T, T, T),
    ("Options:\n- Delete it?\n- Keep it\nI will keep it by default.", T, T, F, T),
    ("I found 2 matches (a.txt and b.txt). Which should I open first? Both are large.",
     T, T, F, T),
    ("Hmm... should I? No. I deleted it.", T, T, F, T),
    ("Would you like me to proceed? Let me know!", T, T, F, T),
    ("## Next steps\nShall I archive the folder?\n\nI left the originals in place.", T, T, F, T),
    ("The folder is empty.", F, F, F, F),
]


@pytest.mark.parametrize(("text", "strict", "qmark", "last", "loose"), CASES)
def test_verdicts(text: object, strict: bool, qmark: bool, last: bool, loose: bool) -> None:
    expected = {"strict": strict, "qmark": qmark, "last": last, "loose": loose}
    got = {d: asks(text, d) for d in DETECTORS}
    assert got == expected


def test_the_four_detectors_and_cases_that_tell_each_pair_apart() -> None:
    """The paper's four detectors, in its order; for every pair of them the cases hold one
    they judge differently (so each detector's own rule is exercised, not only the common
    ground)."""
    assert DETECTORS == ("strict", "qmark", "last", "loose")
    verdicts = [dict(zip(DETECTORS, case[1:], strict=True)) for case in CASES]
    for i, a in enumerate(DETECTORS):
        for b in DETECTORS[i + 1:]:
            assert any(v[a] != v[b] for v in verdicts), (a, b)


def test_default_is_strict() -> None:
    assert asks("Please confirm the recipient.")
    assert not asks("The file should arrive shortly.")


def test_unknown_detector() -> None:
    with pytest.raises(ValueError):
        asks("Shall I?", "lenient")
    with pytest.raises(ValueError):
        asking_sentences(None, "STRICT")


def test_asking_sentences_reports_every_asking_sentence() -> None:
    text = "I found two files. Which one? Shall I delete `a.txt` first? Please confirm. Thanks."
    assert asking_sentences(text) == ["Which one?", "Shall I delete a.txt first?", "Please confirm."]
    assert asking_sentences(text, "qmark") == ["Which one?", "Shall I delete a.txt first?"]
    assert asking_sentences(text, "last") == []
    assert asking_sentences("It should work. Done?", "loose") == ["It should work.", "Done?"]


def test_prose_removes_code_blocks_urls_and_reasoning() -> None:
    text = (
        "<think>should I?</think>Intro.\n```py\nq = 'x?'\n```\n"
        "Run `ls -a?` or `rm` (see https://x.org/a?b=1). <tool_call>{}</tool_call>End."
    )
    out = prose(text)
    for gone in ("think", "should", "q =", "ls -a", "x.org", "?", "tool_call", "`"):
        assert gone not in out
    assert out.startswith("Intro.") and "rm" in out and out.endswith("End.")


def test_prose_keeps_punctuation_after_url_and_names_of_calls() -> None:
    assert prose("Is it https://a.com/x?y=1?") == "Is it ?"
    assert prose("Shall I run [rm(file_name='a?'), mv(source='b')]?") == "Shall I run rm mv ?"
    assert prose("Plain text (with parentheses) and file(s) stays.") == (
        "Plain text (with parentheses) and file(s) stays."
    )
    assert prose("") == ""


@pytest.mark.parametrize("depth", [300, 900, 1500])
def test_a_call_named_by_hundreds_of_attributes_is_read_not_a_failure(depth: int) -> None:
    """``a.a.…a()``: parsed, but its name recursed when unparsed (a RecursionError made the
    whole conversation unscorable); it is read as prose now, as a deeper one always was."""
    text = "Shall I run " + "a." * depth + "a() now?"
    assert [asks(text, d) for d in DETECTORS] == [True] * len(DETECTORS)
    assert prose(text).startswith("Shall I run a.a.")


def test_sentences_splitting() -> None:
    assert sentences("The total is 3.5. Done.") == ["The total is 3.5.", "Done."]
    assert sentences("Use e.g. a.txt, i.e. the log. Ask Mr. Smith! Ok") == [
        "Use e.g. a.txt, i.e. the log.",
        "Ask Mr. Smith!",
        "Ok",
    ]
    assert sentences("Options:\n- one\n* two?\n3. three\n\n   \n") == [
        "Options:",
        "one",
        "two?",
        "three",
    ]
    assert sentences("好的。要删除吗？") == ["好的。", "要删除吗？"]
    assert sentences('He said "Stop. Now?" and left. Bye.') == [
        'He said "Stop. Now?" and left.',
        "Bye.",
    ]
    assert sentences("a line that wraps\nhere. Next") == ["a line that wraps here.", "Next"]
    assert sentences("") == [] and sentences(" --- \n...") == []


_texts = st.one_of(
    st.none(),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200),
    st.text(alphabet="ab ?.!`'\"<>[]{}()=\n:/shouldwy", max_size=120),
)


@settings(max_examples=300, deadline=None)
@given(_texts)
def test_variants_are_consistent(text: str | None) -> None:
    verdict = {d: asks(text, d) for d in DETECTORS}
    for d in DETECTORS:
        assert verdict[d] == bool(asking_sentences(text, d))
    assert not verdict["qmark"] or verdict["strict"]
    assert not verdict["last"] or verdict["strict"]
    assert not verdict["qmark"] or verdict["loose"]


# Texts a hostile result file can hold as a step: openings that never close. Each regex or
# scan that tried every opening against the rest of the text took minutes on 40 KB
# ('{"' 88 s, '[f(' 66 s, '「a' 22 s for two detectors; 2 MB would take hours); every one
# is read once now. The limit is far above the linear time (well under a second here) and
# far below the old quadratic one, so the test fails on the old code without timing it finely.
ADVERSARIAL = ['{"', "[f(", "a(", "x.y(", "「a", "«a", "“a", "‘a", "<think>", "<think",
               "<tool_call>", "<|tool_call|>", "<function=", "{'a': ", "``a"]


@pytest.mark.parametrize("opening", ADVERSARIAL)
def test_openings_without_a_close_are_read_in_linear_time(opening: str) -> None:
    import time

    text = (opening * (100_000 // len(opening) + 1))[:100_000]
    start = time.process_time()
    for detector in ("strict", "last"):
        asks(text, detector)
    assert time.process_time() - start < 20, opening
