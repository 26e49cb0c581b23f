"""kvdiv.config.actions: every action itself at every stratum, checked when the workflow starts (on edits of
config/smoke.yaml that the workflow used to plan without a word), ``allow_degenerate`` as the deliberate exception, and
:func:`degenerate_actions` for the report."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

from kvdiv.config.files import fill_result_defaults

from kvdiv.config import startup
from kvdiv.config.actions import degenerate_actions
from kvdiv.config.checks import check_config
from kvdiv.config.files import ConfigError

REPO = Path(__file__).resolve().parents[1]
SMOKE = yaml.safe_load((REPO / "config/smoke.yaml").read_text())
SNAPKV_512 = {"press": "SnapKVPress", "compression_ratio": 0.5, "window_size": 512}


def started(edit, tmp_path) -> dict:
    """The smoke config edited by ``edit``, through the start-up checks rules/common.smk runs (the schema, every
    cross-key check, every action's press and its strata)."""
    config = copy.deepcopy(SMOKE)
    edit(config)
    given = copy.deepcopy(config)
    validate(config, str(REPO / "kvdiv/data/schema.yaml"))
    fill_result_defaults(config)
    check_config(config, given)
    startup.check_actions(config, [], marker_dir=tmp_path)
    return config


def at_704(config):
    """The issue's case: SnapKV with a 512-token window at 50 % and a 704-token stratum."""
    config["actions"]["snapkv_512"] = dict(SNAPKV_512)
    config["studies"]["retention50"]["strata"] = [{"family": "ruler", "length": 704}]


def test_snapkv_512_at_a_704_token_stratum_fails_at_start_up(tmp_path):
    with pytest.raises(ConfigError) as err:
        started(at_704, tmp_path)
    message = str(err.value)
    assert "studies.retention50: action 'snapkv_512' at stratum ruler_704 (704 entries compressed)" in message
    assert "SnapKVPress keeps 352 entries, and 512 are pinned by its observation window of 512" in message
    assert "it needs kept ≥ 1024" in message and "allow_degenerate: true" in message
    assert not list(tmp_path.iterdir())  # no marker: the next start checks again


def test_allow_degenerate_runs_it_and_degenerate_actions_names_it(tmp_path):
    def edit(config):
        at_704(config)
        config["actions"]["snapkv_512"]["allow_degenerate"] = True

    config = started(edit, tmp_path)
    flagged = degenerate_actions(config)
    assert list(flagged) == ["retention50"] and list(flagged["retention50"]) == ["snapkv_512"]
    assert flagged["retention50"]["snapkv_512"].startswith("stratum ruler_704 (704 entries compressed): SnapKVPress")


def test_the_shipped_configs_start_and_list_their_degenerate_actions(tmp_path):
    """Every shipped config passes the start-up checks; those whose strata are shorter than SnapKV-512 needs
    (2 × 512 kept at 50 %: 2048 tokens) mark it allow_degenerate, and only it."""
    for path in sorted((REPO / "config").glob("*.yaml")):
        config = yaml.safe_load(path.read_text())
        given = copy.deepcopy(config)
        validate(config, str(REPO / "kvdiv/data/schema.yaml"))
        fill_result_defaults(config)
        check_config(config, given)
        startup.check_actions(config, list(config["press_modules"]), marker_dir=tmp_path / path.stem)
        flagged = {study: sorted(actions) for study, actions in degenerate_actions(config).items()}
        degenerate = path.stem in ("smoke", "trajectories_smollm2")
        assert flagged == ({"retention50": ["snapkv_512"]} if degenerate else {}), path.name


@pytest.mark.parametrize(
    "edit, message",
    [
        (  # the same press under two names in one study
            lambda c: (
                c["actions"].update(snapkv_copy={**c["actions"]["snapkv_half"]})
                or c["studies"]["retention50"]["actions"].append("snapkv_copy")
            ),
            r"action 'snapkv_copy' at stratum ruler_768 \(768 entries compressed\): the same press as action "
            "'snapkv_half'",
        ),
        (  # kept_entries equal to a ratio action at the stratum's length: the same press there
            lambda c: (
                c["actions"].update(snapkv_384={"press": "SnapKVPress", "kept_entries": 384, "window_size": 64})
                or c["studies"]["retention50"]["actions"].append("snapkv_384")
            ),
            "action 'snapkv_384' at stratum ruler_768 .*: the same press as action 'snapkv_half'",
        ),
        (
            lambda c: (
                c["actions"].update(snapkv_1024={"press": "SnapKVPress", "kept_entries": 1024})
                or c["studies"]["retention50"]["actions"].append("snapkv_1024")
            ),
            "kept_entries = 1024 keeps all 768 entries compressed: it evicts nothing",
        ),
        (
            lambda c: (
                c["actions"].update(sinks={"press": "StreamingLLMPress", "compression_ratio": 0.99, "n_sink": 8})
                or c["studies"]["retention90"]["actions"].append("sinks")
            ),
            "action 'sinks' at stratum ruler_768 .*StreamingLLMPress keeps 7 entries, and 8 are pinned by its n_sink",
        ),
        (  # a decoding press that cuts at the longest stratum but never at a shorter one
            lambda c: (
                c["actions"].update(
                    dec={
                        "press": "DecodingPress",
                        "target_size": 500,
                        "compression_interval": 4,
                        "wraps": {"press": "KnormPress"},
                    }
                )
                or c["studies"]["retention50"]["actions"].append("dec")
                or c["studies"]["retention50"]["strata"].insert(0, {"family": "ruler", "length": 256})
            ),
            "action 'dec' at stratum ruler_256 .*target_size = 500 .* it never evicts anything",
        ),
        (
            lambda c: (
                c["actions"].update(
                    dec0={
                        "press": "CompressionRatioDecodingPress",
                        "target_compression_ratio": 0.0,
                        "compression_interval": 4,
                        "wraps": {"press": "KnormPress"},
                    }
                )
                or c["studies"]["retention50"]["actions"].append("dec0")
            ),
            "target_compression_ratio 0 keeps every entry",
        ),
        (
            lambda c: (
                c["actions"].update(nothing={"press": "PrefillDecodingPress"})
                or c["studies"]["retention50"]["actions"].append("nothing")
            ),
            "PrefillDecodingPress without a prefilling_press or a decoding_press",
        ),
        (
            lambda c: (
                c["actions"].update(
                    prob={
                        "press": "ProbabilisticPress",
                        "compression_ratio": 0.5,
                        "proposal": "scorer",
                        "scorer": "SnapKVPress",
                        "scorer_kwargs": {"window_size": 64, "compression_ratio": 0.9},
                    }
                )
                or c["studies"]["retention50"]["actions"].append("prob")
            ),
            "actions.prob: .*scorer_kwargs.compression_ratio is ignored",
        ),
    ],
)
def test_actions_that_cannot_be_themselves_are_refused(edit, message, tmp_path):
    with pytest.raises(ConfigError, match=message):
        started(edit, tmp_path)


def test_kept_entries_actions_start(tmp_path):
    def edit(config):
        config["actions"]["snapkv_k256"] = {"press": "SnapKVPress", "kept_entries": 256, "window_size": 64}
        config["studies"]["retention50"]["actions"].append("snapkv_k256")

    assert list(degenerate_actions(started(edit, tmp_path))["retention50"]) == ["snapkv_512"]  # the smoke's own


def test_a_passed_check_is_not_reused_for_other_strata(tmp_path):
    """The start-up marker (a passed check skips the kvpress import next time) covers the studies an action is judged
    in, not only the actions section: the same actions with a study that now runs SnapKV-512 are checked again."""

    def edit(config, *, run_it: bool):
        at_704(config)
        if not run_it:
            config["studies"]["retention50"]["actions"].remove("snapkv_512")
            config["analysis"]["contrasts"] = [["recent_half", "snapkv_half"], ["recent_90", "snapkv_90"]]
            config["analysis"]["table3_contrast"] = ["recent_half", "snapkv_half"]

    started(lambda c: edit(c, run_it=False), tmp_path)
    assert len(list(tmp_path.iterdir())) == 1  # the marker of a passed check
    with pytest.raises(ConfigError, match="action 'snapkv_512' at stratum ruler_704"):
        started(lambda c: edit(c, run_it=True), tmp_path)
