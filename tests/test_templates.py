"""User templates render in a sandboxed, bounded environment: what an attacker's template tries is
refused with one line naming the template; an ordinary template renders as it always did."""

from __future__ import annotations

import pytest

from easyvideor1 import templates
from easyvideor1.errors import UserError
from easyvideor1.templates import TemplateError, compile_template

_BIG = "{% set s = 'a' * 1000000 %}"


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("{{ ''.__class__.__mro__ }}", "attribute '__class__'"),
        ("{{ cycler.__init__.__globals__.os.popen('id').read() }}", "attribute '__init__'"),
        ("{{ joiner.__call__.__globals__ }}", "attribute '__call__'"),
        ("{{ namespace.__init__.__globals__['__builtins__']['open']('/etc/passwd').read() }}", "'__init__'"),
        ("{% include '/etc/passwd' %}", "no loader"),
        ("{% import '/etc/passwd' as p %}", "no loader"),
        ("{% set l = [] %}{{ l.append(1) }}", "attribute 'append'"),
        (
            "{% macro loop_guard(x) %}{{ 'a' * 1000 }}{% endmacro %}{% set loop_guard__ = loop_guard %}"
            "{% for i in 'a' * 1000 %}{% for j in 'a' * 1000 %}{% for k in 'a' * 1000 %}{% endfor %}"
            "{% endfor %}{% endfor %}",
            "loop iterations",
        ),
        ("{% for i in range(10**15) %}x{% endfor %}", "range() of 1,000,000,000,000,000 items"),
        ("{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}", "loop iterations"),
        ("{{ 'a' * 10**12 }}", "operator '*'"),
        ("{{ ['a' * 1000] * 100000 }}", "operator '*'"),
        (_BIG + "{{ s ~ s }}", "operator '~'"),
        (_BIG + "{{ s + s }}", "operator '+'"),
        (
            "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
            "'~'",
        ),
        ("{% set x = 'a' * 100000 %}{% for i in range(100) %}{{ x }}{% endfor %}", "rendered text is longer"),
        (_BIG + "{% set b %}{% for i in range(1000) %}{{ s }}{% endfor %}{% endset %}", "block's output"),
        (
            _BIG + "{% macro m() %}{% for i in range(1000) %}{{ s }}{% endfor %}{% endmacro %}{{ m() }}",
            "block's",
        ),
        ("{{ 99999 ** 99999 }}", "too large"),
        ("{{ 'x' | center(10**10) }}", "center() with a width"),
        ("{{ 'x'.ljust(10**10) }}", "ljust() with a width"),
        ("{{ '%999999999s' % 'x' }}", "format string"),
        ("{{ '{:>999999999}'.format('x') }}", "format string"),
        ("{{ '{:{}}'.format('x', 10**10) }}", "format string"),
        (_BIG + "{{ s | replace('a', s) }}", "replace builds"),
        (_BIG + "{{ range(1000) | map('string') | join(s) }}", "join builds"),
        (_BIG + "{{ s.join(range(1000) | map('string')) }}", "join builds"),
        ("{{ lipsum(10**9) }}", "lipsum() with a width"),
        ("{{ nothing_by_this_name }}", "'nothing_by_this_name' is undefined"),
        ("{{ 1 / 0 }}", "ZeroDivisionError"),
        ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "recursion too deep"),
    ],
)
def test_a_hostile_template_is_refused_in_one_line_naming_it(source, reason) -> None:
    with pytest.raises(TemplateError) as caught:
        compile_template(source, "shared.jinja").render({})
    message = str(caught.value)
    assert message.startswith("shared.jinja: ") and reason in message and "\n" not in message
    assert isinstance(caught.value, UserError)


def test_a_template_that_calls_for_ever_stops_at_the_time_limit(monkeypatch) -> None:
    monkeypatch.setattr(templates, "TIME_LIMIT_S", 0.2)
    doubling = "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}"
    with pytest.raises(TemplateError, match=r"^t.jinja: rendering ran past its 0.2 s limit$"):
        compile_template(doubling, "t.jinja").render({})


def test_a_syntax_error_is_found_when_compiling() -> None:
    with pytest.raises(TemplateError, match=r"^spec.yaml: key 'prompt': Jinja syntax error on line 2"):
        compile_template("ok\n{% if %}", "spec.yaml: key 'prompt'")


_VARIABLES = {
    "problem": " Why? ", "options": ["A. x", "B. y"], "duration": 12.25, "record": {"id": 7, "tags": ["t"]},
    "xs": [1, 2, 3], "tree": [{"n": 1, "c": [{"n": 2, "c": []}]}],
}  # fmt: skip


@pytest.mark.parametrize(
    "source",
    [
        "{{ problem | trim }}{% if options %}\nOptions:\n{{ options | join('\\n') }}{% endif %}\n",
        "{% for o in options %}{{ loop.index }}/{{ loop.length }}={{ o[:1] | lower }}{{ loop.cycle(',', ';') }}"
        "{% else %}none{% endfor %}{% for x in [] %}x{% else %}empty{% endfor %}",
        "{{ '%.1f' % duration }} {{ '{:>4}'.format(record.id) }} {{ (record.tags | map('upper') | list)[0] }}",
        "{{ range(3) | sum }} {{ 2 ** 10 }} {{ 'ab' * 2 ~ '!' }} {{ [1] + [2] }} {{ 'abc' | center(7) }}|",
        "{% for x in tree recursive %}[{{ x.n }}{% if x.c %}{{ loop(x.c) }}{% endif %}]{% endfor %}",
        "{% macro m(n) %}{% for i in range(n) %}{{ caller(i) }}{% endfor %}{% endmacro %}"
        "{% call(i) m(3) %}<{{ i }}>{% endcall %}{% set b %}{{ xs | join('-') }}{% endset %}{{ b }}",
        "{% set ns = namespace(t=0) %}{% for x in xs if x > 1 %}{% set ns.t = ns.t + x %}{% endfor %}"
        "{{ ns.t }} {{ record | tojson }} {{ record.items() | list | length }}",
    ],
)
def test_an_ordinary_template_renders_as_jinja_does(source) -> None:
    import jinja2

    expected = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(source).render(**_VARIABLES)
    assert compile_template(source, "t.jinja").render(_VARIABLES) == expected
