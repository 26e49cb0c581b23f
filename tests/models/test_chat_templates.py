"""Chat templates: rendered as transformers renders them, within a time and size budget, with a frozen clock; and
refused up front when they drop the message or render one message two ways."""

from __future__ import annotations

import json
import time

import pytest

from kvdiv.models import chat_templates
from kvdiv.models.chat_templates import TemplateBudgetError, TemplateProbeError, probe_template, render_user_message
from kvdiv.models.tokenization import BYTES_CHAT_TEMPLATE, apply_chat_template, bytes_tokenizer, configure_chat_template

LLAMA3_STYLE = (
    "{{ bos_token }}{%- if not date_string is defined %}{%- set date_string = strftime_now('%d %b %Y') %}{%- endif %}"
    "<|start_header_id|>system<|end_header_id|>\n\nToday Date: {{ date_string }}<|eot_id|>"
    "{%- for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}"
    "{%- generation %}{{ message['content'] | trim }}{% endgeneration %}{{ '<|eot_id|>' }}"
    "{%- if loop.last and add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
    "{%- endfor %}"
)
TOOLS_STYLE = (
    "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
    "{% if m.role == 'system' %}{% continue %}{% endif %}[{{ ns.n }}] {{ m | tojson }}\n{% endfor %}"
    "{% if tools is not none %}tools{% endif %}{% if add_generation_prompt %}>>{{ eos_token }}{% endif %}"
)
NESTED_LOOPS = (
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}{{ messages[0].content }}"
)


@pytest.mark.parametrize("template", [BYTES_CHAT_TEMPLATE, LLAMA3_STYLE, TOOLS_STYLE])
def test_renders_what_transformers_renders(template):
    """Same text as tokenizer.apply_chat_template (the clock aside: transformers prints today's date)."""
    tok = bytes_tokenizer()
    tok.chat_template = template
    for text in ("Hello <b>", "  two\nlines  ", "é 日"):
        ours = apply_chat_template(tok, text)
        theirs = tok.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )
        if "strftime_now" in template:
            theirs = theirs.replace(time.strftime("%d %b %Y"), chat_templates.FROZEN_CLOCK.strftime("%d %b %Y"))
        assert ours == theirs


def test_nested_range_loops_stop_with_an_error_naming_the_model_and_the_limit():
    tok = bytes_tokenizer()
    start = time.perf_counter()
    with pytest.raises(TemplateBudgetError, match=r"model 'loops'.*budget of (200000 template steps|2 s)"):
        configure_chat_template("loops", tok, {"chat_template": NESTED_LOOPS})
    assert time.perf_counter() - start < 30
    tok.chat_template = NESTED_LOOPS  # a tokenizer's own template, rendered by a job or `kvdiv show`
    with pytest.raises(TemplateBudgetError, match="template steps"):
        apply_chat_template(tok, "x")


def test_time_and_output_size_budgets():
    grow = "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}{{ messages[0].content }}"
    with pytest.raises(TemplateBudgetError, match=r"t: .*2000000 characters"):
        render_user_message(grow, "m", owner="t")
    slow = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    with pytest.raises(TemplateBudgetError, match=r"budget of 0.05 s"):
        chat_templates.render(slow, [], owner="t", max_steps=10**12, max_seconds=0.05)
    big = "{{ messages[0].content * 3 }}"
    with pytest.raises(TemplateBudgetError, match="10 characters"):
        chat_templates.render(big, [{"role": "user", "content": "abcd"}], owner="t", max_chars=10)


def test_a_template_that_drops_the_message_is_refused():
    with pytest.raises(
        TemplateProbeError, match="models.m.chat_template: .*renders two different messages identically"
    ):
        probe_template("{% if add_generation_prompt %}A{% endif %}", owner="models.m.chat_template")
    with pytest.raises(TemplateProbeError, match="model 'm'"):
        configure_chat_template("m", bytes_tokenizer(), {"chat_template": "A"})


def test_a_template_that_renders_one_message_two_ways_is_refused():
    with pytest.raises(TemplateProbeError, match="differently on two renderings"):
        probe_template("{{ range(99999) | random }} {{ messages[0].content }}", owner="m")


def test_the_clock_is_frozen_so_a_dated_template_renders_alike_in_every_job():
    template = "{{ strftime_now('%Y-%m-%d %H:%M:%S.%f') }} {{ messages[0].content }}"
    first = render_user_message(template, "m", owner="t")
    time.sleep(0.01)
    assert render_user_message(template, "m", owner="t") == first == "2026-01-01 00:00:00.000000 m"
    probe_template(template, owner="t")


def test_the_start_up_check_reads_spec_strings_and_resolved_templates(tmp_path):
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "provenance.json").write_text("{}")
    (tmp_path / "own" / "tokenizer_config.json").write_text(json.dumps({"chat_template": "same", "eos_token": "</s>"}))
    good = {"source": "random", "chat_template": BYTES_CHAT_TEMPLATE}
    chat_templates.check_model_templates({"a": good, "own": {"chat_template": False}, "absent": {}}, tmp_path)
    with pytest.raises(TemplateProbeError, match=rf"models.own \({tmp_path / 'own'}\)"):
        chat_templates.check_model_templates({"own": {}}, tmp_path)
    with pytest.raises(TemplateBudgetError, match=r"models.b.chat_template"):
        chat_templates.check_model_templates({"b": {"chat_template": NESTED_LOOPS}}, tmp_path)
    (tmp_path / "own" / "chat_template.jinja").write_text("{{ eos_token }}{{ messages[0].content }}")
    assert chat_templates.read_model_template(tmp_path / "own") == (
        "{{ eos_token }}{{ messages[0].content }}",
        {"eos_token": "</s>"},
    )
    chat_templates.check_model_templates({"own": {}}, tmp_path)
