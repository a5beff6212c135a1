"""Everything a person reads, in English and Simplified Chinese, by code.

Lower layers raise problems as codes with details (templates.params.Problem,
bot.intake.sheets.SheetError); the fronts render them here, in the reader's language.
"""

from __future__ import annotations

from typing import Any

from templates.actions import ACTIONS

LANGS = ("en", "zh")

CATALOG: dict[str, tuple[str, str]] = {
    # A cell's value.
    "required": ("required, but empty", "必填，但为空"),
    "cell_error": ("the cell shows {shown} (an Excel error): fix its formula, or type the value",
                   "单元格显示 {shown}（Excel 错误）：请修正公式，或直接填写数值"),
    "not_whole": ('"{value}" is not a whole number', "“{value}”不是整数"),
    "not_number": ('"{value}" is not a number', "“{value}”不是数字"),
    "too_small": ("{value} is less than {min}", "{value} 小于最小值 {min}"),
    "too_large": ("{value} is more than {max}", "{value} 大于最大值 {max}"),
    "bad_seed": ("{value} is not a seed (0 to {max})", "{value} 不是有效的种子（0 到 {max}）"),
    "not_bool": ('"{value}" is not yes or no (true/false, yes/no, 是/否, 1/0)',
                 "“{value}”不是“是/否”（true/false、yes/no、是/否、1/0）"),
    "not_choice": ('"{value}" is not one of: {choices}', "“{value}”不是可选值之一：{choices}"),
    "not_color": ('"{value}" is not a colour (#RRGGBB, a colour name, or auto)',
                  "“{value}”不是颜色（#RRGGBB、颜色名或 auto）"),
    "not_size": ('"{value}" is not a size like 1024x768 ({min} to {max} pixels a side)',
                 "“{value}”不是尺寸，应如 1024x768（每边 {min} 到 {max} 像素）"),
    # An image a cell names.
    "image_not_found": ('no image "{ref}" among the files sent with the sheet or in the '
                        "assets folder ({assets}): send it with the sheet",
                        "找不到图片“{ref}”：随表格发送的文件和素材目录（{assets}）中都没有，请随表格一起发送"),
    "example_pictures": ("used genbot's example pictures for {names} (no file of that name was "
                         "sent or is in the assets folder): send your own pictures to replace them",
                         "{names} 使用了 genbot 自带的示例图片（没有发送同名文件，素材目录中也没有）："
                         "换成自己的图片请随表格发送"),
    "image_not_found_here": ('no image "{ref}" beside the sheet ({folder}) or in the assets '
                             "folder ({assets}): put it in one of them, or fix the name",
                             "找不到图片“{ref}”：表格所在目录（{folder}）和素材目录（{assets}）中都没有，"
                             "请放入其中之一，或改正文件名"),
    "image_bad_reference": ('"{ref}" is not a file name or an http(s) link',
                            "“{ref}”不是文件名，也不是 http(s) 链接"),
    "image_url_not_allowed": ('downloads from {host} are not allowed (ask an admin to add it '
                              "to intake.url_allowlist)",
                              "不允许从 {host} 下载（请管理员将其加入 intake.url_allowlist）"),
    "image_private_address": ("{host} is a private or local address; downloads from it are "
                              "not allowed", "{host} 是内网或本机地址，不允许从其下载"),
    "image_download_failed": ("could not download {ref}: {reason}", "无法下载 {ref}：{reason}"),
    "image_too_big": ('"{ref}" is {size_mb:.1f} MB; the limit is {max_mb:g} MB',
                      "“{ref}”有 {size_mb:.1f} MB，上限为 {max_mb:g} MB"),
    "image_too_many_pixels": ('"{ref}" is {width}x{height} pixels; the limit is {max:,} pixels',
                              "“{ref}”为 {width}x{height} 像素，上限为 {max:,} 像素"),
    "not_an_image": ('"{ref}" is not an image pillow can read', "“{ref}”不是可读取的图片"),
    # The output file a row would write.
    "output_control": ('output name "{name}" has a control character',
                       "输出文件名“{name}”含有控制字符"),
    "output_absolute": ('output name "{name}" is an absolute path', "输出文件名“{name}”是绝对路径"),
    "output_drive": ('output name "{name}" starts with a drive letter',
                     "输出文件名“{name}”以盘符开头"),
    "output_parent": ('output name "{name}" leaves the batch folder (..)',
                      "输出文件名“{name}”跳出了批次目录（..）"),
    "output_empty_part": ('output name "{name}" has an empty folder name',
                          "输出文件名“{name}”含有空的目录名"),
    "output_reserved": ('output name "{name}": "{part}" is a reserved device name on Windows',
                        "输出文件名“{name}”：“{part}”是 Windows 保留的设备名"),
    "output_trailing": ('output name "{name}": "{part}" ends with a space or a dot',
                        "输出文件名“{name}”：“{part}”以空格或句点结尾"),
    "output_bad_char": ('output name "{name}": "{part}" has a character Windows does not allow',
                        "输出文件名“{name}”：“{part}”含有 Windows 不允许的字符"),
    "output_too_long": ('output name "{name}" is longer than 240 bytes',
                        "输出文件名“{name}”超过 240 字节"),
    "output_same_in_row": ("two save nodes would both write {name}", "两个保存节点都会写入 {name}"),
    "output_duplicate": ('output name "{name}" is already used by row {other}',
                         "输出文件名“{name}”已被第 {other} 行使用"),
    "output_batch_file": ('output name "{name}" is the batch\'s own {own}, which would '
                          "overwrite this row's image: change the value that names it",
                          "输出文件名“{name}”与批次自带的 {own} 重名，会覆盖本行图片：请修改决定文件名的值"),
    "cell_too_long": ("{chars:,} characters; a cell may hold {max:,} ([intake] max_cell_chars)",
                      "共 {chars:,} 个字符，单元格最多 {max:,} 个字符（[intake] max_cell_chars）"),
    "image_too_large": ("asks for a {width}x{height} image ({megapixels:,.0f} megapixels); the "
                        "limit is {max:,.0f} megapixels ([intake] max_output_pixels): ask for a "
                        "smaller size or less upscaling",
                        "要求生成 {width}x{height} 的图片（{megapixels:,.0f} 百万像素），上限为 "
                        "{max:,.0f} 百万像素（[intake] max_output_pixels）：请减小尺寸或放大倍数"),
    "no_executor": ("no running executor can run {what}: {why}. Nothing was queued: fix that "
                    "(the missing file or node, or start an executor that has it), or send again "
                    "with --wait-for-executor to queue it until one can",
                    "没有正在运行的执行器能运行 {what}：{why}。未加入队列：请先解决（补上缺少的文件或节点，"
                    "或启动具备它的执行器），或加上 --wait-for-executor 重新发送，排队等到有执行器可以运行"),
    # The file as a whole.
    "unsupported_format": ('"{file}": {ext} files are not supported; send .xlsx, .xlsm, .xls, '
                           ".ods, .csv or .tsv",
                           "“{file}”：不支持 {ext} 文件，请发送 .xlsx、.xlsm、.xls、.ods、.csv 或 .tsv"),
    "file_too_big": ('"{file}" is {size_mb:.1f} MB; the limit is {max_mb:g} MB',
                     "“{file}”有 {size_mb:.1f} MB，上限为 {max_mb:g} MB"),
    "csv_is_workbook": ('"{file}" is an Excel workbook with a .csv name: rename it to .xlsx, or '
                        "save it as CSV from Excel",
                        "“{file}”其实是 Excel 工作簿，却以 .csv 命名：请改名为 .xlsx，或在 Excel 中另存为 CSV"),
    "password_protected": ('"{file}" is password-protected: remove the password and send it again',
                           "“{file}”设有密码：请移除密码后重新发送"),
    "corrupt": ('"{file}" cannot be read as a spreadsheet (damaged or cut short?): {detail}',
                "无法读取“{file}”（文件损坏或不完整？）：{detail}"),
    "zip_bomb": ('"{file}" unpacks to {unpacked_mb:,.0f} MB; the limit is {max_mb:g} MB',
                 "“{file}”解压后有 {unpacked_mb:,.0f} MB，上限为 {max_mb:g} MB"),
    "bad_encoding": ('"{file}" is text in an encoding genbot cannot tell for sure (tried '
                     '{tried}): save it as "CSV UTF-8" and send it again',
                     "无法确定“{file}”的文字编码（已尝试 {tried}）：请另存为“CSV UTF-8”后重新发送"),
    "empty_sheet": ('"{file}" has no header row', "“{file}”没有表头行"),
    "empty_file": ('"{file}" is empty (0 bytes): send it again', "“{file}”是空文件（0 字节）：请重新发送"),
    "header_errors": ('"{file}": row {row}, where the column names belong, shows only Excel '
                      "errors ({shown}): fix the formulas, or type the names",
                      "“{file}”：第 {row} 行应为列名，却只显示 Excel 错误（{shown}）：请修正公式，或直接填写列名"),
    "old_excel": ('"{file}" is an Excel 4.0 (or older) worksheet, which genbot cannot read: '
                  "open it in Excel and save it as .xlsx",
                  "“{file}”是 Excel 4.0 或更早版本的工作表，无法读取：请用 Excel 打开并另存为 .xlsx"),
    "not_a_sheet": ('"{file}" is {what}, not a spreadsheet: send the .xlsx, .xls, .ods or .csv '
                    "file itself", "“{file}”是{what}，不是电子表格：请发送 .xlsx、.xls、.ods 或 .csv 文件本身"),
    "plain_text": ('"{file}" is plain text, not a spreadsheet; it begins "{start}"',
                   "“{file}”是纯文本，不是电子表格；开头是“{start}”"),
    "saved_as_web_page": ('"{file}" is a web page (HTML) under a spreadsheet name, as some '
                          "systems export: open it in Excel and save it as .xlsx",
                          "“{file}”其实是网页（HTML），只是用了表格的文件名（有些系统这样导出）：请用 Excel 打开并另存为 .xlsx"),
    "saved_as_xml2003": ('"{file}" is an Excel 2003 XML spreadsheet, which genbot cannot read: '
                         "open it in Excel and save it as .xlsx",
                         "“{file}”是 Excel 2003 XML 表格，无法读取：请用 Excel 打开并另存为 .xlsx"),
    "zip_not_workbook": ('"{file}" is a zip archive (holding {members}), not a workbook: unzip '
                         "it and send the sheet inside",
                         "“{file}”是压缩包（内含 {members}），不是工作簿：请解压后发送其中的表格"),
    "xml_entities": ('"{file}" declares XML entities in {part}, which no spreadsheet needs (an '
                     '"XML bomb"?); refused for safety: open it in Excel and save it again',
                     "“{file}”的 {part} 中声明了 XML 实体（电子表格不需要，可能是“XML 炸弹”），为安全起见已拒绝："
                     "请用 Excel 打开后重新保存"),
    "too_many_cells": ('"{file}" declares {count:,} {axis} in a row, more than a spreadsheet '
                       "holds ({limit:,}): it is damaged or crafted; save it again from the "
                       "program that made it",
                       "“{file}”声明了 {count:,} 个连续重复的{axis}，超出电子表格的上限（{limit:,}）："
                       "文件已损坏或被篡改，请在原程序中重新保存"),
    "wrong_extension": ('note: "{file}" is really {kind}; it was read as one (rename it to '
                        "match)", "注意：“{file}”实际上是{kind}，已按此读取（建议改用对应的扩展名）"),
    "no_rows": ('"{file}" has a header but no rows', "“{file}”只有表头，没有数据行"),
    "too_many_rows": ('"{file}" has {rows:,} rows; one submission may have {max:,}',
                      "“{file}”有 {rows:,} 行，一次最多提交 {max:,} 行"),
    "missing_column": ('no column for "{param}"', "缺少“{param}”列"),
    "missing_column_near": ('no column for "{param}" — is "{near}" meant to be it?',
                            "缺少“{param}”列——“{near}”是不是这一列？"),
    "duplicate_column": ('columns {columns} all set "{param}": keep one',
                         "{columns} 这几列都对应“{param}”：请只保留一列"),
    # Reports.
    "cell": ('row {row}, column "{column}": {problem}', "第 {row} 行，“{column}”列：{problem}"),
    "row": ("row {row}: {problem}", "第 {row} 行：{problem}"),
    "did_you_mean": (' — did you mean "{name}"?', "——是不是“{name}”？"),
    "and_more": ("…and {count:,} more", "……另有 {count:,} 处"),
    "unused_columns": ("columns not used by {template}: {columns}",
                       "{template} 未使用这些列：{columns}"),
    "all_valid": ("{file}: all {rows:,} rows are valid for {template}.",
                  "{file}：全部 {rows:,} 行都符合 {template} 的要求。"),
    "some_invalid": ("{file}: {bad:,} of {rows:,} rows have problems; nothing was queued.",
                     "{file}：{rows:,} 行中有 {bad:,} 行有问题，未提交任何任务。"),
    "some_skipped": ("{file}: {bad:,} of {rows:,} rows have problems and are skipped; "
                     "rows going ahead: {good:,}.",
                     "{file}：{rows:,} 行中有 {bad:,} 行有问题，已跳过；{good:,} 行有效。"),
    "file_refused": ("{file}: nothing was queued.", "{file}：未提交任何任务。"),
    # Commands: what was wrong with what was typed, then the usage line.
    "usage": ("usage: {usage}", "用法：{usage}"),
    "empty_command": ("Type a command, e.g. /gen product_main sheet.xlsx; /help lists them.",
                      "请输入命令，例如 /生成 product_main sheet.xlsx；/帮助 列出全部命令。"),
    "unbalanced_quote": ("A quote is not closed; put file names with spaces in quotes: "
                         '/gen social_thumb "my sheet.xlsx"',
                         '引号未闭合；含空格的文件名请用引号括起：/gen social_thumb "my sheet.xlsx"'),
    "unknown_command": ('unknown command "{word}"; /help lists the commands',
                        "未知命令“{word}”；/帮助 列出全部命令"),
    "unknown_command_close": ('unknown command "{word}" (did you mean {name}?)',
                              "未知命令“{word}”（是否想输入 {name}？）"),
    "unknown_option": ("unknown option {option}", "未知选项 {option}"),
    "option_needs_value": ("{option} needs a value", "{option} 需要一个值"),
    "missing_argument": ("{name} is missing", "缺少 {name}"),
    "extra_argument": ('unexpected "{value}"', "多余的参数“{value}”"),
    "bad_role": ('"{role}" is not a role (admin, submitter or viewer)',
                 "“{role}”不是角色（admin、submitter 或 viewer）"),
    "not_an_id": ('"{value}" is not a {what} number', "“{value}”不是有效的编号"),
    "bad_priority": ('"{value}" is not a priority (urgent, high, normal or low)',
                     "“{value}”不是优先级（urgent、high、normal 或 low）"),
    "bad_time": ('"{value}" is not a time: use 21:30, 2026-12-24 08:00 or +2h',
                 "“{value}”不是时间：请用 21:30、2026-12-24 08:00 或 +2h"),
    "time_passed": ('"{value}" has already passed', "“{value}”已经过去"),
    "time_too_far": ('"{value}" is more than {days} days ahead', "“{value}”超过 {days} 天之后"),
    # Permissions and limits.
    "refused_role": ("/{command} needs the {needed} role; you are {role}. Ask an admin.",
                     "/{command} 需要{needed}角色，你的角色是{role}。请联系管理员。"),
    "refused_conversation": ("I don't take commands in this conversation; ask an admin to "
                             "add it to [chat] conversations.",
                             "我不在这个会话中接受命令；请管理员将其加入 [chat] conversations。"),
    "refused_not_owner": ("batch {batch} was submitted by {owner}; only they or an admin may "
                          "{command} it.", "批次 {batch} 由 {owner} 提交；只有提交者或管理员可以"
                          "对其执行 /{command}。"),
    "refused_admin_only": ("only admins may {what}.", "只有管理员可以{what}。"),
    "limit_rows": ("this sheet has {rows:,} rows; you may submit {limit:,} at a time.",
                   "此表格有 {rows:,} 行；你每次最多可提交 {limit:,} 行。"),
    "limit_queued": ("you have {active:,} jobs queued or running; with these {rows:,} that "
                     "would pass your limit of {limit:,}.",
                     "你已有 {active:,} 个任务在排队或运行；再加这 {rows:,} 个会超过上限 {limit:,}。"),
    "limit_rate": ("you have submitted {count} times in the last minute (limit {limit}); try "
                   "again shortly.", "你在一分钟内已提交 {count} 次（上限 {limit}），请稍后再试。"),
    # Delivery: what the bot posts about a batch.
    "accepted": ("Batch {batch} accepted: {jobs:,} {template} jobs. {ahead:,} jobs ahead; {eta}.",
                 "批次 {batch} 已接收：{jobs:,} 个 {template} 任务。前面还有 {ahead:,} 个任务；{eta}。"),
    "eta_minutes": ("done in about {minutes:,} min", "预计约 {minutes:,} 分钟完成"),
    "eta_unknown": ("no estimate yet", "暂无预计时间"),
    "progress": ("Batch {batch} {bar} {done:,}/{total:,} done, {failed:,} failed{canceled}",
                 "批次 {batch} {bar} 已完成 {done:,}/{total:,}，失败 {failed:,}{canceled}"),
    "progress_step": ("row {row}: step {step}/{total}", "第 {row} 行：第 {step}/{total} 步"),
    "batch_prefix": ("Batch {batch} · ", "批次 {batch} · "),
    "image_caption": ("row {row} · {values}", "第 {row} 行 · {values}"),
    "image_caption_job": ("row {row} · job {job} · {values}", "第 {row} 行 · 任务 {job} · {values}"),
    "image_caption_action": ("row {row} · job {job} · {action} of job {parent} · {values}",
                             "第 {row} 行 · 任务 {job} · 由任务 {parent} {action} · {values}"),
    "job_failed": ("row {row} failed: {error}", "第 {row} 行失败：{error}"),
    "summary": ("Batch {batch} finished in {took}: {succeeded:,} of "
                "{total:,} images, {failed:,} failed, {canceled:,} canceled. {attached}",
                "批次 {batch} 已完成，用时 {took}：{total:,} 张中成功 "
                "{succeeded:,} 张，失败 {failed:,}，取消 {canceled:,}。{attached}"),
    "webhook_summary": ("Batch {batch} ({template}) ended in {took}: {succeeded:,} of {total:,} "
                        "images, {failed:,} failed, {canceled:,} canceled.",
                        "批次 {batch}（{template}）已结束，用时 {took}：{total:,} 张中成功 "
                        "{succeeded:,} 张，失败 {failed:,}，取消 {canceled:,}。"),
    "summary_version": (" Made with {template}@{version}.", "使用模板 {template}@{version}。"),
    "chat_banner": ("genbot chat as {who} ({role}). /help lists the commands; attach a file by "
                    "its path: /gen social_thumb examples/social_thumb.xlsx. Ctrl-D ends.",
                    "genbot chat：你是 {who}（{role}）。/帮助 列出全部命令；用路径附上文件：/生成 "
                    "social_thumb examples/social_thumb.xlsx。按 Ctrl-D 结束。"),
    "contact_row": ("row {row}", "第 {row} 行"),
    "took_seconds": ("{seconds:.0f} s", "{seconds:.0f} 秒"),
    "took_minutes": ("{minutes:.1f} min", "{minutes:.1f} 分钟"),
    "attached_both": ("Contact sheet and results sheet attached.", "附联系表和结果表。"),
    "attached_results": ("Results sheet attached.", "附结果表。"),
    "digest": ("genbot, the last 24 hours: {batches:,} batches submitted; {succeeded:,} images "
               "made, {failed:,} failed, {canceled:,} canceled{mean}. Now: {queued:,} queued{paused}.",
               "genbot 过去 24 小时：提交 {batches:,} 个批次；生成 {succeeded:,} 张图，失败 "
               "{failed:,}，取消 {canceled:,}{mean}。当前：排队 {queued:,}{paused}。"),
    "digest_mean": (", {seconds:.1f} s each on average", "，平均每张 {seconds:.1f} 秒"),
    "digest_paused": (", the queue is paused", "，队列已暂停"),
    "digest_top": ("Most images: {who}.", "生成最多：{who}。"),
    "accepted_at": ("Batch {batch} accepted: {jobs:,} {template} jobs, to start at {at}.",
                    "批次 {batch} 已接收：{jobs:,} 个 {template} 任务，将于 {at} 开始。"),
    "retry_of": (" (a retry of batch {batch}'s failed jobs)", "（重试批次 {batch} 中失败的任务）"),
    "batch_started": ("Batch {batch}: started — {total:,} images on their way",
                      "批次 {batch}：已开始生成，共 {total:,} 张"),
    "milestone": ("Batch {batch}: {percent}% — {done:,}/{total:,} done, {failed:,} failed"
                  "{canceled}",
                  "批次 {batch}：{percent}% — 已完成 {done:,}/{total:,}，失败 {failed:,}{canceled}"),
    "button_cancel": ("Cancel batch", "取消批次"),
    "button_keep": ("Keep it", "不取消"),
    "confirm_cancel": ("Cancel batch {batch}? Queued jobs end now, a running one at its next "
                       "step.", "取消批次 {batch}？排队中的任务立即结束，运行中的任务在下一步停止。"),
    "undelivered": ("I could not post {what} here: {error}", "无法在此发送{what}：{error}"),
    "what_image": ("the image of row {row}", "第 {row} 行的图片"),
    "what_message": ("a message", "一条消息"),
    "col_row": ("row", "行号"),
    "col_status": ("status", "状态"),
    "col_output": ("output", "输出文件"),
    "col_error": ("error", "错误"),
    "col_job": ("job", "任务"),
    "col_parent": ("made from job", "来源任务"),
    "col_action": ("action", "操作"),
    "col_rating": ("rating", "评价"),
    "col_model": ("model", "模型"),
    "col_version": ("template version", "模板版本"),
    "col_swept": ("swept values", "扫描取值"),
    "rating_kept": ("kept", "保留"),
    "rating_rejected": ("rejected", "淘汰"),
    "picks": ("Picks of batch {batch}: {count} kept image(s), with their values to run them "
              "again exactly.", "批次 {batch} 的精选：{count} 张保留的图片，附可原样重跑的参数。"),
    "picks_none": ("Batch {batch} has no kept images yet: keep some with ⭐ or /keep ROW.",
                   "批次 {batch} 还没有保留的图片：用 ⭐ 或 /keep 行号 保留。"),
    "help_picks": ("the kept images of a batch and what was made from it, as a contact sheet "
                   "and a results sheet", "批次及其衍生图片中保留的图片：缩略图总览和结果表"),
    # Replies to commands.
    "internal_error": ("Something went wrong on my side with that (ref {ref}); an admin can find "
                       "it in the log.", "处理时出了内部错误（编号 {ref}），管理员可在日志中查到。"),
    "file_received": ("Got {names}. To run a sheet: /gen TEMPLATE {name} (/templates lists the "
                      "templates).", "已收到 {names}。提交表格：/gen 模板名 {name}（/templates 列出全部模板）。"),
    "images_received": ("Got {names}; a sheet's rows can name them.",
                        "已收到 {names}；表格中的行可以引用这些图片。"),
    "unknown_template": ('no template "{name}"; templates: {names}',
                         "没有模板“{name}”；可用模板：{names}"),
    "unknown_template_close": ('no template "{name}" — did you mean {close}? Templates: {names}',
                               "没有模板“{name}”——是不是 {close}？可用模板：{names}"),
    "no_sheet": ("I have no spreadsheet from you. Send one (.xlsx, .csv …), then type /gen "
                 "{template} FILE.", "我还没有收到你的表格。请先发送表格（.xlsx、.csv 等），再输入 "
                 "/gen {template} 文件名。"),
    "file_not_found": ('I have no file "{file}" from you.', "我没有收到过你的文件“{file}”。"),
    "file_ambiguous": ("Several spreadsheets came with this message ({names}); name one: /gen "
                       "{template} FILE", "这条消息带有多个表格（{names}）；请指定一个：/gen "
                       "{template} 文件名"),
    "file_hint_dm": ("Send the file to me in a direct (1:1) chat first; then /gen here can "
                     "name it.", "请先在与我的单聊中发送文件；之后即可在这里用 /gen 引用它。"),
    "recent_files": ("Files you sent lately: {files}", "你最近发送的文件：{files}"),
    "file_age": ("{name} ({minutes:,} min ago)", "{name}（{minutes:,} 分钟前）"),
    "download_html": ('could not fetch "{file}": Slack sent its sign-in page instead of the '
                      "file (the bot token is wrong or lacks files:read)",
                      "无法获取“{file}”：Slack 返回的是登录页而不是文件（机器人令牌有误或缺少 files:read 权限）"),
    "download_size": ('could not fetch "{file}" whole: got {got:,} bytes of {expected:,}; send '
                      "it again", "“{file}”下载不完整：收到 {got:,} 字节，应为 {expected:,} 字节；请重新发送"),
    "download_failed": ('could not fetch "{file}": {reason}', "无法获取“{file}”：{reason}"),
    "dry_run": ("Dry run: {jobs:,} {template} jobs would be queued; nothing was queued.",
                "试运行：将提交 {jobs:,} 个 {template} 任务；实际未提交任何任务。"),
    "queue_full": ("The queue has room for {free:,} more jobs (limit {limit:,}) but this sheet "
                   "has {requested:,}: nothing was queued.",
                   "队列还能容纳 {free:,} 个任务（上限 {limit:,}），此表格有 {requested:,} 个：未提交任何任务。"),
    "no_batches": ("You have no batches yet.", "你还没有提交过批次。"),
    "no_batch": ("There is no batch {batch}.", "没有批次 {batch}。"),
    "no_job": ("There is no job {job}.", "没有任务 {job}。"),
    "template_name_bad": ("{name} cannot be a template name: letters, digits, _ and -, up to "
                          "64, starting with a letter or digit.",
                          "{name} 不能作为模板名：只能用字母、数字、_ 和 -，最多 64 个，"
                          "以字母或数字开头。"),
    "template_dir_unset": ("Imported templates need a folder of their own: set [templates] dir "
                           "(copy the shipped ones there to keep them).",
                           "导入的模板需要单独的文件夹：请设置 [templates] dir（可把内置模板复制"
                           "过去以保留它们）。"),
    "template_exists": ("There is a template {name} already; add --replace to replace it.",
                        "已有模板 {name}；加 --replace 可替换它。"),
    "workflow_refused": ("The workflow cannot be imported: {why}", "无法导入该工作流：{why}"),
    "object_info_failed": ("Cannot read the node list of ComfyUI server {server}: {why}.",
                           "无法读取 ComfyUI 服务器 {server} 的节点列表：{why}。"),
    "template_imported": ("Template {name}@{version} imported from {how} of {file}. Its "
                          "columns:\n{columns}\nNext: /template {name} for an example sheet.",
                          "已从 {file}（{how}）导入模板 {name}@{version}。它的列：\n{columns}"
                          "\n下一步：/template {name} 获取示例表格。"),
    "template_import_file": ("Send the workflow first (a .json file, or a PNG ComfyUI "
                             "saved), then /template import NAME [FILE].",
                             "请先发送工作流（.json 文件，或 ComfyUI 保存的 PNG），再发送 "
                             "/template import 名称 [文件]。"),
    "no_delivery": ("There is no webhook delivery {delivery}.", "没有 webhook 投递 {delivery}。"),
    "no_endpoint": ("There is no webhook endpoint {endpoint} (configured: {endpoints}).",
                    "没有 webhook 端点 {endpoint}（已配置：{endpoints}）。"),
    "delivery_owed": ("Webhook delivery {delivery} is still being sent; it is retried on its "
                      "own.", "webhook 投递 {delivery} 仍在发送中，会自动重试。"),
    "callback_url_bad": ("The callback URL {url} cannot be used: expected http(s)://host/path, "
                         "without a user or password, at most {most:,} characters.",
                         "回调地址 {url} 无法使用：应为 http(s)://主机/路径，不含用户名和密码，"
                         "最多 {most:,} 个字符。"),
    "callback_url_unresolved": ("The callback URL's host {host} has no address (DNS "
                                "cannot find it).", "回调地址的主机 {host} 无法解析（DNS 找不到"
                                "它）。"),
    "callback_url_private": ("The callback URL's host {host} is a private, loopback or "
                             "link-local address (or resolves to one); genbot posts only to "
                             "public hosts unless [webhook] callback_allowlist names it.",
                             "回调地址的主机 {host} 是内网、本机或链路本地地址（或解析到这类地址）；"
                             "除非 [webhook] callback_allowlist 列出它，genbot 只向公网主机发送。"),
    "status": ("Batch {batch} · {template} · {owner}\n{bar} {done:,}/{total:,} done, {failed:,} "
               "failed{canceled}; {queued:,} queued, {running:,} running",
               "批次 {batch} · {template} · {owner}\n{bar} 已完成 {done:,}/{total:,}，失败 "
               "{failed:,}{canceled}；排队 {queued:,}，运行中 {running:,}"),
    "and_canceled": (", {canceled:,} canceled", "，取消 {canceled:,}"),
    "status_waiting": ("{ahead:,} jobs ahead; {eta}", "前面还有 {ahead:,} 个任务；{eta}"),
    "status_at": ("starts at {at}", "将于 {at} 开始"),
    "queue_paused": ("The queue is paused (by {by}): running jobs finish, none start.",
                     "队列已暂停（由 {by}）：运行中的任务会完成，不再启动新任务。"),
    "queue_running": ("The queue is running.", "队列运行中。"),
    "queue_counts": ("{queued:,} queued, {running:,} running", "排队 {queued:,}，运行中 {running:,}"),
    "queue_eta": ("all queued jobs {eta}", "全部排队任务{eta}"),
    "queue_job": ("job {job}: batch {batch} · {template} · row {row} · {minutes:.1f} min",
                  "任务 {job}：批次 {batch} · {template} · 第 {row} 行 · {minutes:.1f} 分钟"),
    "queue_worker_busy": ("executor {name} ({device}): job {job}", "执行器 {name}（{device}）：任务 {job}"),
    "queue_worker_idle": ("executor {name} ({device}): idle", "执行器 {name}（{device}）：空闲"),
    "queue_worker_lost": ("executor {name} ({device}): lost, silent for {minutes:.0f} min",
                          "执行器 {name}（{device}）：失联，已 {minutes:.0f} 分钟无心跳"),
    "queue_worker_building_demo": (" · building demo models: {models}", " · 正在生成演示模型：{models}"),
    "queue_worker_loading": (" · loading {models}", " · 正在加载 {models}"),
    "queue_worker_server_down": (" · server down: {models}", " · 服务器无法连接：{models}"),
    "queue_worker_cannot": ("  {name} cannot run {template}: {why}",
                            "  {name} 无法运行模板 {template}：{why}"),
    "queue_worker_takes": (" · takes {models}", " · 接收 {models}"),
    "queue_unplaced": ("{jobs:,} queued jobs need {model}, which no running executor takes.",
                       "{jobs:,} 个排队任务需要 {model}，没有运行中的执行器接收。"),
    "status_unplaced": ("Waiting: no running executor can run {what} ({why}); it runs once "
                        "one that can is started.",
                        "等待中：没有正在运行的执行器能运行 {what}（{why}）；有能运行的执行器启动后即会运行。"),
    "unplaced_notice": ("Batch {batch} is waiting: no running executor can run {what} ({why}). "
                        "It runs once one that can is started; /cancel {batch} to drop it.",
                        "批次 {batch} 在等待：没有正在运行的执行器能运行 {what}（{why}）。"
                        "有能运行的执行器启动后即会运行；发送 /cancel {batch} 可取消。"),
    "demo_note": (" Demo model ({models}) — images are noise; see README, Models, for real ones.",
                  "（演示模型 {models}——生成的图是噪点；真实模型见 README 的 Models 一节。）"),
    "queue_executor_starting": ("The executor is starting: queued jobs begin once it is up.",
                                "执行器正在启动：启动后即开始处理排队任务。"),
    "queue_no_workers": ("No executor is running: queued jobs wait until one starts.",
                         "没有运行中的执行器：排队任务将等待执行器启动。"),
    "canceled": ("Canceled: {ended:,} queued jobs ended, {asked:,} running told to stop.",
                 "已取消：{ended:,} 个排队任务已结束，{asked:,} 个运行中的任务将停止。"),
    "nothing_to_cancel": ("Nothing to cancel: no queued or running jobs there.",
                          "没有可取消的任务：那里没有排队或运行中的任务。"),
    "retried": ("Batch {batch}: its {jobs:,} failed jobs go again as batch {new}.",
                "批次 {batch}：{jobs:,} 个失败任务作为批次 {new} 重新运行。"),
    "retried_already": ("Batch {batch}'s failed jobs are already being retried as batch {new}.",
                        "批次 {batch} 的失败任务已在作为批次 {new} 重试。"),
    # Iterating on images: keep, reject, again, vary, upscale, edit.
    "action_unknown": ('"{action}" is not an action; use one of: {actions}.',
                       "“{action}”不是可用操作；可用：{actions}。"),
    "action_count": ("Ask for 1 to {max} images at a time, not {count}.",
                     "每次可要 1 到 {max} 张图，不是 {count}。"),
    "action_count_one": ("{action} makes one image; leave the count out.",
                         "{action} 每次只生成一张图；请去掉数量。"),
    "action_not_finished": ("Job {job} is {status}: wait until it has finished.",
                            "任务 {job} 仍是 {status}：请等它完成。"),
    "action_no_image": ("Job {job} has no image to use ({status}); pick a finished image.",
                        "任务 {job} 没有可用的图片（{status}）；请选一张已完成的图片。"),
    "action_outputs_gone": ("The images of batch {batch} were deleted (auto_save is off or "
                            "retention removed them): job {job} can no longer be varied or "
                            "upscaled. Use again or edit, which make it anew.",
                            "批次 {batch} 的图片已删除（auto_save 已关闭或已过保留期）：任务 "
                            "{job} 无法再变体或放大。请用“再来”或“修改”重新生成。"),
    "action_template_gone": ('Template "{template}" is no longer loaded: the image cannot be '
                             "made again. Ask an admin to restore it.",
                             "模板“{template}”已不在：无法重新生成。请联系管理员恢复。"),
    "action_batch_gone": ("Batch {batch} of job {job} is gone (retention removed it).",
                          "任务 {job} 所在的批次 {batch} 已不在（已过保留期）。"),
    "action_no_batch": ("There is no batch here yet: reply in a batch's thread, or name the "
                        "image as job N (its caption shows it).",
                        "这里还没有批次：请在批次的消息串中回复，或用“任务 N”指定图片（见图片说明）。"),
    "action_no_row": ("Batch {batch} has no row {row}; its rows are {rows}.",
                      "批次 {batch} 没有第 {row} 行；它的行是 {rows}。"),
    "action_no_seed": ('Template "{template}" has no seed parameter: again would make the same '
                       "image. Use edit to change a value.",
                       "模板“{template}”没有种子参数：再来会得到同一张图。请用“修改”改一个值。"),
    "vary_no_image": ('Template "{template}" (ComfyUI) has no image input to feed the picture '
                      "into, so it cannot vary one; use again for new seeds.",
                      "模板“{template}”（ComfyUI）没有可输入图片的参数，无法做变体；请用“再来”换种子。"),
    "vary_no_model": ('Template "{template}" generates nothing (no model step), so it cannot '
                      "vary an image; use upscale or edit.",
                      "模板“{template}”没有生成步骤，无法做变体；请用“放大”或“修改”。"),
    "action_too_large": ("That would be a {width}x{height} image ({megapixels:,.0f} megapixels); "
                         "the limit is {max:,.0f} megapixels ([intake] max_output_pixels): ask "
                         "for less upscaling or a smaller size.",
                         "这会生成 {width}x{height} 的图片（{megapixels:,.0f} 百万像素），上限为 "
                         "{max:,.0f} 百万像素（[intake] max_output_pixels）：请减小放大倍数或尺寸。"),
    "vary_strength_comfy": ('Template "{template}" runs a ComfyUI workflow, whose own denoise '
                            "sets how far a variation goes: leave the strength out.",
                            "模板“{template}”运行 ComfyUI 工作流，变化幅度由工作流自身的 denoise "
                            "决定：请去掉强度。"),
    "vary_count_no_seed": ('Template "{template}" has no seed parameter: its variations of one '
                           "image would all be the same. Ask for one.",
                           "模板“{template}”没有种子参数：同一张图的多个变体会完全相同。请只要一张。"),
    "vary_strength": ("A vary strength is above 0 and at most 1 (0.35 changes details), not "
                      "{value}.", "变体强度应大于 0 且不超过 1（0.35 只改细节），不是 {value}。"),
    "upscale_factor": ("An upscale factor is more than 1 and at most {max:g}, not {value}.",
                       "放大倍数应大于 1 且不超过 {max:g}，不是 {value}。"),
    "edit_unknown": ('"{key}" is not a value of this template; it has: {names}.',
                     "“{key}”不是此模板的参数；可改的有：{names}。"),
    "edit_image": ('"{key}" is a picture: it cannot be changed by an edit; submit a sheet '
                   "with the new picture instead.",
                   "“{key}”是图片：无法通过修改更换；请提交带新图片的表格。"),
    "edit_value": ("{key}: {problem}", "{key}：{problem}"),
    "edit_usage": ("Row {row} (job {job}) has: {values}\nChange any with {command} {job_ref} "
                   "KEY=VALUE …, e.g. {command} {job_ref} {example}",
                   "第 {row} 行（任务 {job}）的值：{values}\n用 {command} {job_ref} 键=值 … 修改，"
                   "例如 {command} {job_ref} {example}"),
    "edit_form_title": ("Edit row {row}", "修改第 {row} 行"),
    "edit_form_submit": ("Run", "生成"),
    "edit_pair": ('"{value}" is not KEY=VALUE (e.g. steps=30, prompt="a red bottle").',
                  "“{value}”不是 键=值 的形式（例如 steps=30、prompt=\"红色瓶子\"）。"),
    "rating_unknown": ('"{rating}" is not a rating: keep, reject or unkeep.',
                       "“{rating}”不是评价：keep、reject 或 unkeep。"),
    "acted": ("{action}: {jobs} new image(s) of row {row} (job {job}) queued as batch {batch}; "
              "they come into this thread.",
              "{action}：第 {row} 行（任务 {job}）的 {jobs} 张新图已排队（批次 {batch}），"
              "完成后发到此消息串。"),
    "acted_already": ("{action} of job {job} was asked a moment ago: batch {batch} is on it.",
                      "任务 {job} 的 {action} 刚刚已提交：批次 {batch} 正在处理。"),
    "kept": ("⭐ Kept row {row} (job {job}).", "⭐ 已保留第 {row} 行（任务 {job}）。"),
    "rejected": ("👎 Rejected row {row} (job {job}).", "👎 已淘汰第 {row} 行（任务 {job}）。"),
    "unkept": ("Row {row} (job {job}) is no longer kept or rejected.",
               "第 {row} 行（任务 {job}）已取消评价。"),
    # each image action's verb (templates.actions.ACTIONS; on a button after its icon)
    "verb_again": ("Again", "再来"),
    "verb_vary": ("Vary", "变体"),
    "verb_upscale": ("Upscale", "放大"),
    "verb_edit": ("Edit", "修改"),
    # … and what it makes, as a line of the CLI's help (genbot job --help)
    "about_again": ("the same row with new seeds", "同一行，换新种子"),
    "about_vary": ("close variations of the image", "图片的相近变体"),
    "about_upscale": ("the image enlarged", "放大的图片"),
    "about_edit": ("the row again with some values changed", "改几个值后重跑这一行"),
    "button_keep_image": ("⭐ Keep", "⭐ 保留"),
    "image_actions": ("row {row} · job {job}", "第 {row} 行 · 任务 {job}"),
    # Sweeps: --vary and --seeds.
    "sweep_value": ("--vary {key}: {problem}", "--vary {key}：{problem}"),
    "sweep_syntax": ('"{value}" is not KEY=V1,V2,… or KEY=START..STOP:STEP (e.g. steps=20,30 '
                     "or guidance=3..7:2).",
                     "“{value}”不是 键=值1,值2,… 或 键=起..止:步长 的形式（例如 steps=20,30 或 "
                     "guidance=3..7:2）。"),
    "sweep_unknown": ('--vary "{key}": this template has no such value; it has: {names}.',
                      "--vary “{key}”：此模板没有这个参数；可用的有：{names}。"),
    "sweep_image": ('--vary "{key}": a picture cannot be swept; put each picture on its own row '
                    "of the sheet.", "--vary “{key}”：图片不能扫描；请把每张图片写在表格的单独一行。"),
    "sweep_twice": ('--vary "{key}" is given twice: list all its values once (KEY=V1,V2,V3).',
                    "--vary “{key}”给了两次：请一次列出所有值（键=值1,值2,值3）。"),
    "sweep_empty_value": ('--vary "{key}" has an empty value: remove the extra comma.',
                          "--vary “{key}”有空值：请删去多余的逗号。"),
    "sweep_values": ('--vary "{key}" has {count:,} values; at most {max} on one axis.',
                     "--vary “{key}”有 {count:,} 个值；每个维度最多 {max} 个。"),
    "sweep_step": ('--vary "{key}": a range\'s step is more than 0.',
                   "--vary “{key}”：范围的步长应大于 0。"),
    "sweep_backwards": ('--vary "{key}": the range {start}..{stop} runs backwards; write the '
                        "smaller number first.", "--vary “{key}”：范围 {start}..{stop} 是倒序的；"
                        "请把较小的数写在前面。"),
    "sweep_seeds": ("--seeds is 1 to {max}, not {value}.", "--seeds 应为 1 到 {max}，不是 {value}。"),
    "sweep_no_seed": ('Template "{template}" has no seed parameter: --seeds would make the same '
                      "image again.", "模板“{template}”没有种子参数：--seeds 只会重复同一张图。"),
    "sweep_too_big": ("This sweep makes {jobs:,} jobs; at most {max:,} at a time: sweep fewer "
                      "values.", "此次扫描会生成 {jobs:,} 个任务；一次最多 {max:,} 个：请减少取值。"),
    "sweep_confirm": ("This sweep makes {jobs:,} jobs ({rows:,} rows × {each:,} each) on {models}"
                      ", about {eta} at the recent pace. To queue them, send the same command "
                      "with --yes:\n{command}",
                      "此次扫描会生成 {jobs:,} 个任务（{rows:,} 行 × 每行 {each:,} 个），使用 "
                      "{models}，按近期速度约需 {eta}。确认排队请发送带 --yes 的同一命令：\n{command}"),
    "no_version": ('Template "{name}" has no version {number}; its latest is {latest} '
                   "(genbot template history {name}).",
                   "模板“{name}”没有版本 {number}；最新为 {latest}（genbot template history {name}）。"),
    "no_label": ('Template "{name}" has no version labelled "{label}" (labels: {labels}).',
                 "模板“{name}”没有标记为“{label}”的版本（已有标记：{labels}）。"),
    "refine_not_sweep": ("Batch {batch} is no sweep: /refine narrows a sweep (/gen … --vary …) "
                         "from its ratings.", "批次 {batch} 不是扫描：/refine 根据评价收窄扫描"
                         "（/gen … --vary …）。"),
    "refine_no_ratings": ("Nothing of batch {batch} is rated yet: keep (⭐) the images you like "
                          "and reject (👎) the others, then /refine {batch}.",
                          "批次 {batch} 还没有评价：请保留（⭐）喜欢的图片、淘汰（👎）其余的，"
                          "然后 /refine {batch}。"),
    "refine_head": ("Batch {batch}: {rated} images rated. Kept, by value:",
                    "批次 {batch}：已评价 {rated} 张。按取值的保留情况："),
    "refine_value": ("  {param} = {value}: kept {kept} of {rated} rated ({percent}){best}",
                     "  {param} = {value}：已评价 {rated} 张，保留 {kept} 张（{percent}）{best}"),
    "refine_best": (" ← best", " ← 最佳"),
    "refine_unrated": ("  {param}: not rated, kept as it was", "  {param}：未评价，保持原样"),
    "refine_next": ("Next, narrowed around the best:\n{command}",
                    "下一轮，围绕最佳值收窄：\n{command}"),
    "button_run_it": ("Run it", "运行"),
    "help_refine": ("from a sweep's ratings, the keep rate of each value and the next, narrower "
                    "sweep to run", "根据扫描的评价，给出各取值的保留率和下一轮更窄的扫描"),
    "grid_title": ("row {row}{page}", "第 {row} 行{page}"),
    "sweep_grid": ('--grid "{key}" is not one of the swept values ({axes}).',
                   "--grid “{key}”不是扫描的参数之一（{axes}）。"),
    "sweep_grid_count": ("--grid names one or two of the swept values, across then down.",
                         "--grid 指定一到两个扫描的参数：先横向，再纵向。"),
    "ab_not_compare": ("Batch {batch} compares nothing: /ab tallies a batch made with "
                       "/gen NAME@A NAME@B FILE --compare.",
                       "批次 {batch} 没有对比：/ab 统计用 /gen 名称@A 名称@B 文件 --compare 生成的批次。"),
    "ab_head": ("Batch {batch}, {rated} of {rows} rows rated:", "批次 {batch}，{rows} 行中已评价 {rated} 行："),
    "ab_won": ("  {variant}: kept in {won} rows where the other was not",
               "  {variant}：{won} 行中被保留而另一版本未被保留"),
    "ab_ties": ("  tie (both or neither kept): {ties}", "  平局（都保留或都未保留）：{ties}"),
    "ab_unrated": ("  not rated yet: {unrated} rows", "  尚未评价：{unrated} 行"),
    "help_webhooks": ("admins: webhook endpoints and their deliveries; test one, resend one",
                      "管理员：webhook 端点及其投递；测试端点，重发投递"),
    "webhooks_none": ("No webhook endpoints: add [[webhooks]] to the config, or submit with a "
                      "callback URL.", "没有 webhook 端点：在配置中添加 [[webhooks]]，或提交时"
                      "带上回调地址。"),
    "webhooks_head": ("{count} webhook endpoints:", "{count} 个 webhook 端点："),
    "webhooks_endpoint": ("  {endpoint} {url}: {sent:,} sent, {pending:,} pending, {failed:,} "
                          "failed{off}", "  {endpoint} {url}：已送达 {sent:,}，待发送 "
                          "{pending:,}，失败 {failed:,}{off}"),
    "webhooks_disabled": (" — disabled: {why}", " — 已停用：{why}"),
    "webhooks_usage": ("/webhooks lists the endpoints; /webhooks test ENDPOINT sends a test; "
                       "/webhooks redeliver DELIVERY sends one again.",
                       "/webhooks 列出端点；/webhooks test 端点 发送测试；/webhooks redeliver "
                       "投递编号 重新发送。"),
    "webhook_sent": ("Delivery {delivery} ({type}) to {endpoint}: taken (HTTP {status}).",
                     "投递 {delivery}（{type}）到 {endpoint}：已送达（HTTP {status}）。"),
    "webhook_not_sent": ("Delivery {delivery} ({type}) to {endpoint} was not taken ({state}): "
                         "{error}", "投递 {delivery}（{type}）到 {endpoint} 未送达（{state}）："
                         "{error}"),
    "help_ab": ("an A/B batch's tally: the rows each version won by keeps",
                "A/B 对比批次的统计：各版本按保留赢得的行数"),
    "compare_param": ('Template "{template}" needs {names}, which "{other}" does not have: '
                      "compare versions that take the same values.",
                      "模板“{template}”需要 {names}，而“{other}”没有：请比较参数相同的版本。"),
    "compare_too_many": ("{count} versions to compare; at most 26 (A to Z).",
                         "要比较 {count} 个版本；最多 26 个（A 到 Z）。"),
    "compare_needs_two": ("--compare runs each row through two templates or versions: /gen "
                          "NAME@3 NAME@4 FILE --compare.",
                          "--compare 让每行分别用两个模板或版本生成：/gen 名称@3 名称@4 文件 --compare。"),
    "sweep_no_models": ("no model (image operations only)", "无模型（仅图像处理）"),
    "button_yes_queue": ("Queue {jobs:,} jobs", "排队 {jobs:,} 个任务"),
    "nothing_to_retry": ("Batch {batch} has no failed jobs.", "批次 {batch} 没有失败的任务。"),
    "paused_now": ("Paused: no new jobs start; running ones finish. /resume goes on.",
                   "已暂停：不再启动新任务，运行中的任务会完成。/resume 恢复。"),
    "paused_already": ("The queue was already paused.", "队列本来就已暂停。"),
    "resumed_now": ("Resumed: jobs start again.", "已恢复：任务重新开始运行。"),
    "resumed_already": ("The queue was not paused.", "队列并未暂停。"),
    "doctor_none": ("No job is leased now: nothing claimed ahead, nothing running.",
                    "当前没有被占用的任务：没有预领的，也没有运行中的。"),
    "doctor_head": ("{count} leased jobs, the quietest first; {stuck} look stuck (no sign of life for {minutes:.0f} min, or held by an executor that is gone):",
                    "{count} 个被占用的任务，最久没有动静的在前；{stuck} 个疑似卡住（{minutes:.0f} 分钟没有进展，或占用它的执行器已不在）："),
    "doctor_ahead": ("job {job} (batch {batch}, row {row}) claimed ahead by {holder} ({state}), waiting {minutes:.1f} min",
                     "任务 {job}（批次 {batch}，第 {row} 行）由 {holder}（{state}）预领，已等 {minutes:.1f} 分钟"),
    "doctor_running": ("job {job} (batch {batch}, row {row}) running on {holder} ({state}), no progress for {minutes:.1f} min",
                       "任务 {job}（批次 {batch}，第 {row} 行）在 {holder}（{state}）上运行，{minutes:.1f} 分钟无进展"),
    "doctor_quiet": (" — STUCK", " — 疑似卡住"),
    "doctor_holder_gone": (" — STUCK: its executor is gone", " — 疑似卡住：执行器已不在"),
    "doctor_how": ("/doctor JOB … hands those jobs back to the queue (no attempt used); /doctor stuck hands back every stuck one.",
                   "/doctor 任务号 … 把这些任务交还队列（不计尝试次数）；/doctor stuck 交还所有疑似卡住的任务。"),
    "doctor_handed_back": ("Handed back {count} jobs ({jobs}): they run again, no attempt used; whoever held them stops at its next heartbeat.",
                           "已交还 {count} 个任务（{jobs}）：它们会重新运行，不计尝试次数；原执行器在下次心跳时停止。"),
    "doctor_nothing_handed": ("None of those jobs is leased now: nothing was handed back.",
                              "这些任务当前都没有被占用：没有交还任何任务。"),
    "templates_list": ("Templates (/template NAME for columns and an example sheet):",
                       "模板（/template 模板名 查看列说明和示例表格）："),
    "template_info": ("{name}: {description}\nColumns (* required):\n{columns}\nAn example "
                      "sheet is attached.", "{name}：{description}\n列（* 为必填）：\n{columns}\n"
                      "附示例表格。"),
    "template_pictures": ("Its rows name genbot's example pictures ({names}), attached below: "
                          "send the sheet back as it is with /gen {name} to try it, or send your "
                          "own pictures with it.",
                          "表格中的行引用了 genbot 自带的示例图片（{names}，附在下面）：原样发回并输入 "
                          "/生成 {name} 即可试用，也可以随表格发送自己的图片。"),
    "bad_timezone": ('"{value}" is not a time zone: use an IANA name such as Asia/Shanghai or UTC',
                     "“{value}”不是时区：请用 IANA 名称，如 Asia/Shanghai 或 UTC"),
    "bad_cron": ('"{value}" is not a cron line: five fields, minute hour day month weekday, '
                 'e.g. "0 9 * * 1-5"', "“{value}”不是 cron 表达式：应为五段（分 时 日 月 周），例如 "
                 '"0 9 * * 1-5"'),
    "scheduled": ("Schedule {id}: {template} from {sheet} at \"{cron}\" ({zone}); next run "
                  "{next}.", "定时 {id}：{template}，表格 {sheet}，时间“{cron}”（{zone}）；下次运行 {next}。"),
    "schedules_none": ("No recurring batches.", "没有定时批次。"),
    "schedule_line": ("{id}: {template} from {sheet} at \"{cron}\" ({zone}), by {by}; next {next}",
                      "{id}：{template}，表格 {sheet}，“{cron}”（{zone}），由 {by} 创建；下次 {next}"),
    "unscheduled": ("Schedule {id} removed.", "已删除定时 {id}。"),
    "no_schedule": ("There is no schedule {id}.", "没有定时 {id}。"),
    "granted": ("{user} is now {role}.", "{user} 现在的角色是 {role}。"),
    "revoked": ("{user}'s granted role is removed; they are now {role}.",
                "已撤销 {user} 被授予的角色；其现在的角色是 {role}。"),
    "revoke_none": ("{user} has no granted role.", "{user} 没有被授予的角色。"),
    "revoke_config_admin": ("{user} is an admin in the config; /revoke cannot change that.",
                            "{user} 是配置文件中的管理员；/revoke 无法更改。"),
    # /help
    "help_intro": ("Commands (also without the slash, or after @genbot):",
                   "命令（也可不带斜杠，或在 @genbot 之后输入）："),
    "help_gen": ("queue one image job per row of a sheet you sent me",
                 "按你发给我的表格，每行提交一个出图任务"),
    "help_status": ("progress of a batch (default: your latest)", "查看批次进度（默认：你最近的批次）"),
    "help_queue": ("what is queued and running, and whether the queue is paused",
                   "查看排队和运行中的任务，以及队列是否暂停"),
    "help_cancel": ("cancel a batch, one job, all your batches, or everything (admins)",
                    "取消批次、单个任务、你的全部批次，或全部任务（管理员）"),
    "help_again": ("the same row with new seeds (N images); ROW as captioned, or job N",
                   "同一行换种子重新生成（N 张）；行号见图片说明，或用“任务 N”"),
    "help_vary": ("N close variations of an image", "为图片生成 N 张相近的变体"),
    "help_upscale": ("enlarge an image (2×, or the factor given)", "放大图片（2 倍或指定倍数）"),
    "help_edit": ("change a row's values (prompt, steps, seed …) and run it again; without "
                  "values, show them", "修改一行的值（提示词、步数、种子…）并重新生成；不带值则显示当前值"),
    "help_keep": ("keep an image (⭐): picks are the kept images", "保留图片（⭐）：精选即保留的图片"),
    "help_reject": ("reject an image (👎)", "淘汰图片（👎）"),
    "help_unkeep": ("take an image's keep or reject back", "取消图片的保留或淘汰"),
    "help_retry": ("run a batch's failed jobs again", "重新运行批次中失败的任务"),
    "help_pause": ("stop starting new jobs (admins); running jobs finish",
                   "暂停启动新任务（管理员）；运行中的任务会完成"),
    "help_resume": ("start jobs again (admins)", "恢复启动任务（管理员）"),
    "help_doctor": ("admins: leased jobs that show no sign of life; hand them back to the queue",
                    "管理员：查看长时间没有进展的被占用任务，并把它们交还队列"),
    "help_templates": ("the templates you can use", "可用的模板"),
    "help_template": ("a template's columns, with an example sheet; admins: import NAME makes "
                      "one from a ComfyUI workflow or PNG you sent",
                      "模板的列说明及示例表格；管理员：import 名称 可用你发送的 ComfyUI 工作流"
                      "或 PNG 创建模板"),
    "help_grant": ("give a user a role (admins)", "为用户授予角色（管理员）"),
    "help_revoke": ("take a user's granted role away (admins)", "撤销用户被授予的角色（管理员）"),
    "help_schedule": ("run a sheet on a cron, e.g. \"0 9 * * 1-5\" (admins)",
                      "按 cron 定时运行表格，例如 \"0 9 * * 1-5\"（管理员）"),
    "help_schedules": ("the recurring batches", "定时批次列表"),
    "help_unschedule": ("stop a recurring batch (admins)", "停止定时批次（管理员）"),
    "help_help": ("this list, or one command's usage", "显示本列表，或某个命令的用法"),
}


BAR = 20  # characters in a progress bar


def bar(done: int, total: int) -> str:
    """Progress as people read it: ████████░░░░░░░░░░░░"""
    filled = round(BAR * done / total) if total else BAR
    return "█" * filled + "░" * (BAR - filled)


class Both(str):
    """A detail that is itself words: English as the str, Chinese beside it."""

    zh: str

    def __new__(cls, en: str, zh: str) -> Both:
        text = super().__new__(cls, en)
        text.zh = zh
        return text


# What a file turns out to be, in both languages (bot.intake.sheets tells them apart).
KINDS = {
    "png": Both("a PNG image", "PNG 图片"), "jpeg": Both("a JPEG image", "JPEG 图片"),
    "gif": Both("a GIF image", "GIF 图片"), "pdf": Both("a PDF document", "PDF 文档"),
    "rar": Both("a RAR archive", "RAR 压缩包"), "7z": Both("a 7-Zip archive", "7-Zip 压缩包"),
    "gzip": Both("a gzip archive", "gzip 压缩包"),
    "xml": Both("an XML document", "XML 文档"), "binary": Both("binary data", "二进制数据"),
    "word": Both("a Word document", "Word 文档"),
    "powerpoint": Both("a PowerPoint file", "PowerPoint 文件"),
    ".xlsx": Both("an .xlsx workbook", " .xlsx 工作簿"),
    ".xls": Both("an .xls workbook", " .xls 工作簿"),
    ".ods": Both("an .ods spreadsheet", " .ods 表格"),
    ".csv": Both("a text table (CSV)", "文本表格（CSV）"),
    "rows": Both("rows", "行"), "columns": Both("columns", "列"),
}

CONTROL = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v", "\f": "\\f", "\x00": "\\0"}


def han(text: str) -> bool:
    """Any Chinese character: the Chinese alias of a column, a command typed in Chinese."""
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


def visible(text: str) -> str:
    """Text from a cell or a header, safe to quote in a sentence: control characters
    (a NUL, a vertical tab, a line break inside a header) shown as escapes."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch == " " else
                   CONTROL.get(ch, f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else
                               f"\\u{ord(ch):04x}") for ch in text)


ROLES_ZH = {"admin": "管理员", "submitter": "提交者", "viewer": "查看者", "none": "无权限"}


def canceled(lang: str, count: int) -> str:
    """", 2 canceled" where any were: a canceled job is not a failed one."""
    return say("and_canceled", lang, canceled=count) if count else ""


def took(lang: str, seconds: float) -> str:
    """A duration as people read it: seconds under two minutes, else minutes."""
    if seconds < 120:
        return say("took_seconds", lang, seconds=max(seconds, 1 if seconds > 0 else 0))
    return say("took_minutes", lang, minutes=seconds / 60)


def action_label(name: str, lang: str = "en") -> str:
    """An image action as a button reads: its icon and its verb ("🔁 Again")."""
    spec = ACTIONS.get(name)
    if spec is None:  # (a job made by an action since taken out of the table)
        return name
    return f"{spec.icon} {say(spec.verb, lang)}".strip()


def say(code: str, lang: str = "en", **details: Any) -> str:
    """The message for `code` in `lang` ("en" or "zh"): plain text, the details as they were
    given. It is written as it reads (an API error, a CLI line, a label in results.xlsx);
    a chat adapter escapes it for its platform as it posts it (bot.chat.markup), so a
    detail from a person, a file or a server can never be markup there."""
    en, zh = CATALOG[code]
    template = zh if lang == "zh" else en
    details = {k: (v.zh if lang == "zh" else str(v)) if isinstance(v, Both) else v
               for k, v in details.items()}
    if lang == "zh":  # a role is named in the reader's language
        details |= {k: ROLES_ZH[details[k]] for k in ("role", "needed")
                    if code != "bad_role" and details.get(k) in ROLES_ZH}
    if "choices" in details and not isinstance(details["choices"], str):
        details = {**details, "choices": ", ".join(map(str, details["choices"]))}
    return template.format(**details)
