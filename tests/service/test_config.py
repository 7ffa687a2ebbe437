"""Config tree: defaults, YAML file, environment overrides, and clear errors on bad keys and values."""

import pytest

from service.config import ConfigError, ServiceConfig, load_config


def test_defaults_are_valid():
    cfg = load_config(None, environ={})
    assert isinstance(cfg, ServiceConfig)
    assert cfg.server.port == 50051
    assert cfg.audio.encoding == "PCMU" and cfg.audio.frame_ms == 20 and cfg.audio.lead_ms == 60


def test_file_then_env_override(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("server:\n  port: 6000\n  max_calls: 4\naudio:\n  encoding: L16\n  sample_rate_hz: 16000\n")
    cfg = load_config(f, environ={"VOXPOOL__SERVER__PORT": "7000", "VOXPOOL__VOICE__AUTO_INSTALL": "false"})
    assert cfg.server.port == 7000  # env wins over the file
    assert cfg.server.max_calls == 4
    assert cfg.audio.sample_rate_hz == 16000
    assert cfg.voice.auto_install is False


def test_unknown_key_names_the_key(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("server:\n  prot: 6000\n")
    with pytest.raises(ConfigError, match=r"server: unknown key\(s\) \['prot'\]"):
        load_config(f, environ={})


def test_unknown_section_from_env():
    with pytest.raises(ConfigError, match="unknown key"):
        load_config(None, environ={"VOXPOOL__NOPE__X": "1"})


@pytest.mark.parametrize(
    "env, msg",
    [
        ({"VOXPOOL__AUDIO__SAMPLE_RATE_HZ": "12000"}, "sample_rate_hz 12000 is not supported; use 8000, 11025"),
        ({"VOXPOOL__AUDIO__SAMPLE_RATE_HZ": "16000"}, "PCMU is G.711, which is 8 kHz only"),
        ({"VOXPOOL__AUDIO__ENCODING": "L16", "VOXPOOL__AUDIO__SAMPLE_RATE_HZ": "11025"}, r"frame_ms 20 .*use 40"),
        ({"VOXPOOL__AUDIO__FRAME_MS": "25"}, "frame_ms"),
        ({"VOXPOOL__AUDIO__LEAD_MS": "900"}, "lead_ms"),
        ({"VOXPOOL__AUDIO__START_BUFFER_MS": "5000"}, r"audio.start_buffer_ms: 5000 must be within 0..2000"),
        ({"VOXPOOL__AUDIO__START_WAIT_MS": "-1"}, "audio.start_wait_ms"),
        ({"VOXPOOL__AUDIO__ENCODING": "OPUS"}, "encoding"),
        ({"VOXPOOL__SERVER__PORT": "abc"}, "server.port"),
        ({"VOXPOOL__ENGINE__WEIGHTS": "int4"}, "weights"),
        ({"VOXPOOL__ENGINE__NO_SUCH_KNOB": "1"}, "no_such_knob"),
    ],
)
def test_bad_values_say_what_to_change(env, msg):
    with pytest.raises(ConfigError, match=msg):
        load_config(None, environ=env)


def test_every_offered_rate_is_a_valid_default():
    from protos.voxpool.v1 import wire

    for rate in wire.SAMPLE_RATES_HZ:
        env = {"VOXPOOL__AUDIO__ENCODING": "L16", "VOXPOOL__AUDIO__SAMPLE_RATE_HZ": str(rate),
               "VOXPOOL__AUDIO__FRAME_MS": str(wire.fitting_frame_ms(rate))}
        assert load_config(None, environ=env).audio.sample_rate_hz == rate


def test_missing_file():
    with pytest.raises(ConfigError, match="does not exist"):
        load_config("/nonexistent/voxpool.yaml", environ={})
