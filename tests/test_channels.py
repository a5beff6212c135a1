"""Sales channels as data (templates.channels): the shipped presets, a team's own file, and
what a file that cannot be used is told — by file, channel and key."""

from __future__ import annotations

import pytest

from templates.channels import (
    ChannelError,
    Missing,
    Unknown,
    catalogue,
    chosen,
    distinct,
    file_name,
    load_file,
    presets,
)

SHOPS = {"taobao", "jd", "pinduoduo", "douyin", "xiaohongshu", "wechat_moments", "amazon",
         "shopify", "instagram"}


def test_the_presets_cover_the_channels_a_launch_needs_each_with_its_source():
    found = presets()
    assert set(found) == SHOPS
    text = (found["taobao"].source and open(found["taobao"].source, encoding="utf-8").read())
    for name in SHOPS:  # each preset's table starts with where its figures come from
        after = text.split(f"[{name}]\n", 1)[1]
        assert after.startswith("# "), f"[{name}] has no source comment"
    amazon = found["amazon"].renditions[0]
    assert (amazon.size, amazon.background, amazon.text, amazon.fill) == \
        ((2000, 2000), "white", False, 0.85)
    assert found["amazon"].label == "optional"  # a shop outside China: an admin may drop it
    assert all(found[n].label == "required" for n in SHOPS - {"amazon", "shopify",
                                                               "instagram"})
    assert found["douyin"].renditions[0].size == (1080, 1920)
    assert found["xiaohongshu"].renditions[0].size == (1080, 1440)
    assert found["taobao"].title_zh == "淘宝 / 天猫"


def test_a_team_file_adds_channels_and_replaces_presets_by_name(tmp_path):
    team = tmp_path / "channels.toml"
    team.write_text('''
[tmall_global]
title = "Tmall Global"
title_zh = "天猫国际"
[[tmall_global.renditions]]
name = "main"
size = [800, 800]
file = "{sku}-{n}.{ext}"

[taobao]
title = "Taobao (ours)"
title_zh = "淘宝（自定）"
[[taobao.renditions]]
name = "main"
size = [1000, 1000]
format = "webp"
''', encoding="utf-8")
    found = catalogue(str(team))
    assert {"tmall_global", *SHOPS} == set(found)
    assert [r.size for r in found["taobao"].renditions] == [(1000, 1000)]  # replaced whole
    assert found["jd"] == presets()["jd"]
    team.write_text(team.read_text(encoding="utf-8").replace("[1000, 1000]", "[900, 900]"),
                    encoding="utf-8")
    assert catalogue(str(team))["taobao"].renditions[0].size == (900, 900)  # read again


@pytest.mark.parametrize("body, where, says", [
    ('[x]\ntitle = "X"\ntitle_zh = "X"\nrenditions = []\n', "[x]", "has no renditions"),
    ('[x]\ntitle = "X"\ntitle_zh = "X"\n[[x.renditions]]\nname = "m"\nsize = [800]\n',
     "[x]", "renditions[0].size"),
    ('[x]\ntitle = "X"\ntitle_zh = "X"\n[[x.renditions]]\nname = "m"\nsize = [800, 800]\n'
     'colour = "red"\n', "[x]", "colour"),
    ('[x]\ntitle = "X"\ntitle_zh = "X"\n[[x.renditions]]\nname = "m"\nsize = [800, 800]\n'
     'fit = "stretch"\n', "[x]", "renditions[0].fit"),
    ('[x]\ntitle = "X"\ntitle_zh = "X"\n[[x.renditions]]\nname = "m"\nsize = [8, 800]\n',
     "[x] renditions[0] size", "from 16 to 10000"),
    ('[x]\ntitle = "X"\ntitle_zh = "X"\n[[x.renditions]]\nname = "m"\nsize = [80, 80]\n'
     'file = "{sku!r}.jpg"\n', "[x] renditions[0] file", "not a plain name"),
    ('[x]\ntitle = "X"\ntitle_zh = "X"\n[[x.renditions]]\nname = "m"\nsize = [80, 80]\n'
     'file = "{sku}.png"\n', "[x] renditions[0] file", 'does not end in ".jpg"'),
    ('[x]\ntitle = "X"\ntitle_zh = "X"\n[[x.renditions]]\nname = "m"\nsize = [80, 80]\n'
     'file = "a/{sku}.jpg"\n', "[x] renditions[0] file", "no folders"),
    ('[x]\ntitle = "X"\ntitle_zh = "X"\n[[x.renditions]]\nname = "m"\nsize = [80, 80]\n'
     'fill = 1.5\n', "[x] renditions[0] fill", "such as 0.85"),
    ('[x]\ntitle = "X"\ntitle_zh = "X"\n[x.ai_label]\nheight = 0.001\n[[x.renditions]]\n'
     'name = "m"\nsize = [80, 80]\n', "[x] ai_label.height", "at least 0.05"),
    ('[Bad-Name]\ntitle = "X"\n', "[Bad-Name]", "lowercase letters"),
    ("[x\n", "-", "is not TOML"),
])
def test_a_channels_file_that_cannot_be_used_says_where_and_what(tmp_path, body, where, says):
    path = tmp_path / "team.toml"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(ChannelError) as caught:
        load_file(path)
    assert caught.value.file == str(path)
    assert caught.value.where == where, str(caught.value)
    assert says in caught.value.message, str(caught.value)


def test_channel_names_are_read_as_people_type_them_and_a_typo_gets_its_nearest():
    known = presets()
    assert [c.name for c in chosen(["Taobao, douyin", "taobao", " amazon "], known)] == \
        ["taobao", "douyin", "amazon"]
    with pytest.raises(Unknown) as caught:
        chosen(["taobao,douyn"], known)
    assert (caught.value.name, caught.value.close) == ("douyn", "douyin")
    with pytest.raises(Unknown) as caught:
        chosen(["ebay"], known)
    assert caught.value.close is None and "taobao" in caught.value.known


def test_file_names_fill_the_pattern_from_the_row_and_keep_to_what_a_zip_can_hold():
    r = presets()["taobao"].renditions[0]
    assert file_name(r, "taobao", 1, {"SKU": 1001.0}) == "1001_taobao_1.jpg"
    assert file_name(r, "taobao", 2, {"sku": 'a/b:c*"d'}) == "a_b_c_d_taobao_2.jpg"
    with pytest.raises(Missing) as caught:
        file_name(r, "taobao", 1, {"sku": "  "})
    assert (caught.value.field, caught.value.channel) == ("sku", "taobao")
    assert distinct([("taobao", "a.jpg"), ("douyin", "a.jpg"), ("taobao", "a.jpg"),
                     ("taobao", "a.jpg")]) == ["a.jpg", "a.jpg", "a-2.jpg", "a-3.jpg"]


def test_genbot_channels_lists_what_channels_and_layout_take_here(tmp_path, capsys):
    """The command --channels' help names: presets and the team's channels, each file,
    the label rule; the layouts with the columns they read; a broken layout said, not
    thrown (en and zh)."""
    from bot.cli.genbot import build_parser
    (tmp_path / "assets" / "layouts").mkdir(parents=True)
    (tmp_path / "assets" / "layouts" / "broken.json").write_text("{", encoding="utf-8")
    (tmp_path / "team.toml").write_text(
        '[ours]\ntitle = "Ours"\ntitle_zh = "我们的"\n[[ours.renditions]]\nname = "main"\n'
        'size = [640, 640]\nfit = "pad"\nfile = "{sku}.{ext}"\n', encoding="utf-8")
    config = tmp_path / "genbot.toml"
    config.write_text(f'[service]\ndata_dir = "{tmp_path / "data"}"\n[assets]\n'
                      f'dir = "{tmp_path / "assets"}"\n[deliver]\n'
                      f'channels = "{tmp_path / "team.toml"}"\nunlabelled = ["amazon"]\n',
                      encoding="utf-8")
    for lang in ("en", "zh"):
        args = build_parser().parse_args(["channels", "--config", str(config), "--lang", lang])
        assert args.func(args) == 0
    en, zh = capsys.readouterr().out.split("taobao", 2)[1:]
    assert "ours: Ours (visible AI label: required)\n  main: 640×640, pad, jpg → {sku}.{ext}" \
        in en
    assert "amazon: Amazon (visible AI label: off ([deliver] unlabelled))" in en
    assert "layout launch: Launch: headline, price, a NEW badge and the brand's logo — " \
        "aspects 1:1, 3:4, 9:16, 16:9; locales zh, en, ar; reads headline, logo, price" in en
    assert "layout broken cannot be used:" in en and "is not JSON" in en
    assert "ours：我们的（可见 AI 标识：必须）" in zh and "版式 broken 无法使用" in zh


def test_a_refusal_on_the_command_line_is_said_in_its_lang(tmp_path, capsys):
    """The application layer's no (an unknown layout, before the sheet is read) in the
    language --lang asked for, as chat says it in the person's."""
    from bot.cli.genbot import main
    from tests.conftest import ROOT
    config = tmp_path / "genbot.toml"
    config.write_text(f'[service]\ndata_dir = "{tmp_path / "data"}"\n', encoding="utf-8")
    assert main(["run", "product_main", str(ROOT / "examples" / "product_main.xlsx"),
                 "--channels", "taobao", "--layout", "lanch", "--lang", "zh",
                 "--config", str(config)]) == 1
    assert capsys.readouterr().err.strip() == \
        "genbot: 没有名为“lanch”的版式——您是想用“launch”吗？可用版式：launch。"
