"""Everything a person reads, by code: the English here, beside its code; every other
language in its gettext catalog (bot/locales/<locale>/LC_MESSAGES/genbot.po, read by
bot.i18n). `say(code, lang, **details)` is what every front calls.

Lower layers raise problems as codes with details (templates.params.Problem,
bot.intake.sheets.SheetError); the fronts render them here, in the reader's language.
A new message is one `N_(code, english)` line below (words that follow a number: one
`NP_(code, one, many)` line, the number its `count` detail), then `pybabel`
(docs/architecture.md, "a message") puts it in each catalog for its translators.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from bot import i18n
from bot.i18n import N_, NP_, han
from storage.reviews import Review
from templates.actions import ACTIONS

__all__ = ["CATALOG", "N_", "NP_", "PLURALS", "han", "say"]

PLURALS: dict[str, str] = {}  # code -> its English for many, of a message NP_ marks


def catalog(*messages: tuple[str, ...]) -> dict[str, str]:
    """code -> English (of a message that follows a number, for one: its English for many
    is in PLURALS); a code given twice is a mistake, caught at import."""
    made: dict[str, str] = {}
    for code, english, *many in messages:
        if code in made:
            raise ValueError(f"message {code!r} is declared twice")
        made[code] = english
        if many:
            PLURALS[code] = many[0]
    return made


CATALOG: dict[str, str] = catalog(
    # A cell's value.
    N_("required", "required, but empty"),
    N_("cell_error", "the cell shows {shown} (an Excel error): fix its formula, or type the value"),
    N_("not_whole", '"{value}" is not a whole number'),
    N_("not_number", '"{value}" is not a number'),
    N_("too_small", "{value} is less than {min}"),
    N_("too_large", "{value} is more than {max}"),
    N_("bad_seed", "{value} is not a seed (0 to {max})"),
    N_("not_bool", '"{value}" is not yes or no (true/false, yes/no, 是/否, 1/0)'),
    N_("not_choice", '"{value}" is not one of: {choices}'),
    N_("not_color", '"{value}" is not a colour (#RRGGBB, a colour name, or auto)'),
    N_("not_size", '"{value}" is not a size like 1024x768 ({min} to {max} pixels a side)'),
    # An image a cell names.
    N_("image_not_found", 'no image "{ref}" among the files sent with the sheet or in the assets '
                          "folder ({assets}): send it with the sheet"),
    N_("example_pictures", "used genbot's example pictures for {names} (no file of that name was "
                           "sent or is in the assets folder): send your own pictures to replace "
                           "them"),
    N_("image_not_found_here", 'no image "{ref}" beside the sheet ({folder}) or in the assets '
                               "folder ({assets}): put it in one of them, or fix the name"),
    N_("image_bad_reference", '"{ref}" is not a file name or an http(s) link'),
    N_("image_url_not_allowed", "downloads from {host} are not allowed (ask an admin to add it "
                                "to intake.url_allowlist)"),
    N_("image_private_address", "{host} is a private or local address; downloads from it are not "
                                "allowed"),
    N_("image_download_failed", "could not download {ref}: {reason}"),
    N_("image_too_big", '"{ref}" is {size_mb:.1f} MB; the limit is {max_mb:g} MB'),
    N_("image_too_many_pixels", '"{ref}" is {width}x{height} pixels; the limit is {max:,} pixels'),
    N_("not_an_image", '"{ref}" is not an image pillow can read'),
    # The output file a row would write.
    N_("output_control", 'output name "{name}" has a control character'),
    N_("output_absolute", 'output name "{name}" is an absolute path'),
    N_("output_drive", 'output name "{name}" starts with a drive letter'),
    N_("output_parent", 'output name "{name}" leaves the batch folder (..)'),
    N_("output_empty_part", 'output name "{name}" has an empty folder name'),
    N_("output_reserved", 'output name "{name}": "{part}" is a reserved device name on Windows'),
    N_("output_trailing", 'output name "{name}": "{part}" ends with a space or a dot'),
    N_("output_bad_char", 'output name "{name}": "{part}" has a character Windows does not allow'),
    N_("output_too_long", 'output name "{name}" is longer than 240 bytes'),
    N_("output_same_in_row", "two save nodes would both write {name}"),
    N_("output_duplicate", 'output name "{name}" is already used by row {other}'),
    N_("output_batch_file", "output name \"{name}\" is the batch's own {own}, which would "
                            "overwrite this row's image: change the value that names it"),
    N_("model_cannot_run", 'model "{model}" is {label} ({family}), which genbot runs for '
                           "{modes}, not {mode}: name a model that does"),
    N_("model_reads_no_negative", 'model "{model}" is {label} ({family}), which reads no '
                                  "negative prompt: leave it empty (say what to avoid in the "
                                  "prompt instead)"),
    N_("model_takes_no_reference", "model \"{model}\" is {label} ({family}), which takes no reference "
                                   "picture (an IP-Adapter runs on SD 1.5 and SDXL models): leave it "
                                   "empty, or on an edit model give it as picture 2"),
    NP_("model_too_many_pictures", 'model "{model}" is {label} ({family}): it edits with '
                                   "{count} picture at most, not {given}",
        'model "{model}" is {label} ({family}): it edits with {count} pictures at most, '
        "not {given}"),
    N_("prompt_too_long", 'the prompt is {tokens} tokens long, but model "{model}" ({label}) '
                          "reads only the first {max}: the rest would be cut off without a "
                          "word. Shorten it"),
    N_("instruction_too_many_tokens", 'the instruction is {tokens} tokens long, but model '
                                      '"{model}" ({label}) reads only the first {max}: the '
                                      "rest would be cut off without a word. Shorten it"),
    N_("cell_too_long", "{chars:,} characters; a cell may hold {max:,} ([intake] max_cell_chars)"),
    N_("image_too_large", "asks for a {width}x{height} image ({megapixels:,.0f} megapixels); the "
                          "limit is {max:,.0f} megapixels ([intake] max_output_pixels): ask for "
                          "a smaller size or less upscaling"),
    N_("no_executor", "no running executor can run {what}: {why}. Nothing was queued: fix that "
                      "(the missing file or node, or start an executor that has it), or send "
                      "again with --wait-for-executor to queue it until one can"),
    # The file as a whole.
    N_("unsupported_format", '"{file}": {ext} files are not supported; send .xlsx, .xlsm, .xls, '
                             ".ods, .csv or .tsv"),
    N_("file_too_big", '"{file}" is {size_mb:.1f} MB; the limit is {max_mb:g} MB'),
    N_("csv_is_workbook", '"{file}" is an Excel workbook with a .csv name: rename it to .xlsx, '
                          "or save it as CSV from Excel"),
    N_("password_protected", '"{file}" is password-protected: remove the password and send it '
                             "again"),
    N_("corrupt", '"{file}" cannot be read as a spreadsheet (damaged or cut short?): {detail}'),
    N_("zip_bomb", '"{file}" unpacks to {unpacked_mb:,.0f} MB; the limit is {max_mb:g} MB'),
    N_("bad_encoding", '"{file}" is text in an encoding genbot cannot tell for sure (tried '
                       '{tried}): save it as "CSV UTF-8" and send it again'),
    N_("empty_sheet", '"{file}" has no header row'),
    N_("empty_file", '"{file}" is empty (0 bytes): send it again'),
    N_("header_errors", '"{file}": row {row}, where the column names belong, shows only Excel '
                        "errors ({shown}): fix the formulas, or type the names"),
    N_("old_excel", '"{file}" is an Excel 4.0 (or older) worksheet, which genbot cannot read: '
                    "open it in Excel and save it as .xlsx"),
    N_("not_a_sheet", '"{file}" is {what}, not a spreadsheet: send the .xlsx, .xls, .ods or .csv '
                      "file itself"),
    N_("plain_text", '"{file}" is plain text, not a spreadsheet; it begins "{start}"'),
    N_("saved_as_web_page", '"{file}" is a web page (HTML) under a spreadsheet name, as some '
                            "systems export: open it in Excel and save it as .xlsx"),
    N_("saved_as_xml2003", '"{file}" is an Excel 2003 XML spreadsheet, which genbot cannot read: '
                           "open it in Excel and save it as .xlsx"),
    N_("zip_not_workbook", '"{file}" is a zip archive (holding {members}), not a workbook: unzip '
                           "it and send the sheet inside"),
    N_("xml_entities", '"{file}" declares XML entities in {part}, which no spreadsheet needs (an '
                       '"XML bomb"?); refused for safety: open it in Excel and save it again'),
    N_("too_many_cells", '"{file}" declares {count:,} {axis} in a row, more than a spreadsheet '
                         "holds ({limit:,}): it is damaged or crafted; save it again from the "
                         "program that made it"),
    N_("wrong_extension", 'note: "{file}" is really {kind}; it was read as one (rename it to '
                          "match)"),
    N_("no_rows", '"{file}" has a header but no rows'),
    N_("too_many_rows", '"{file}" has {rows:,} rows; one submission may have {max:,}'),
    N_("missing_column", 'no column for "{param}"'),
    N_("missing_column_near", 'no column for "{param}" — is "{near}" meant to be it?'),
    N_("duplicate_column", 'columns {columns} all set "{param}": keep one'),
    # Reports.
    N_("cell", 'row {row}, column "{column}": {problem}'),
    N_("row", "row {row}: {problem}"),
    N_("did_you_mean", ' — did you mean "{name}"?'),
    N_("and_more", "…and {count:,} more"),
    N_("unused_columns", "columns not used by {template}: {columns}"),
    N_("all_valid", "{file}: all {rows:,} rows are valid for {template}."),
    N_("some_invalid", "{file}: {bad:,} of {rows:,} rows have problems; nothing was queued."),
    N_("some_skipped", "{file}: {bad:,} of {rows:,} rows have problems and are skipped; rows "
                       "going ahead: {good:,}."),
    N_("file_refused", "{file}: nothing was queued."),
    # Commands: what was wrong with what was typed, then the usage line.
    N_("usage", "usage: {usage}"),
    N_("empty_command", "Type a command, e.g. /gen product_main sheet.xlsx; /help lists them."),
    N_("unbalanced_quote", "A quote is not closed; put file names with spaces in quotes: /gen "
                           'social_thumb "my sheet.xlsx"'),
    N_("unknown_command", 'unknown command "{word}"; /help lists the commands'),
    N_("unknown_command_close", 'unknown command "{word}" (did you mean {name}?)'),
    N_("unknown_option", "unknown option {option}"),
    N_("option_needs_value", "{option} needs a value"),
    N_("missing_argument", "{name} is missing"),
    N_("extra_argument", 'unexpected "{value}"'),
    N_("bad_role", '"{role}" is not a role (admin, submitter or viewer)'),
    N_("not_an_id", '"{value}" is not a {what} number'),
    N_("id_batch", "batch"),
    N_("id_job", "job"),
    N_("id_schedule", "schedule"),
    N_("id_delivery", "delivery"),
    N_("id_row", "row"),
    N_("id_count", "count"),
    N_("id_seeds", "seeds"),
    N_("bad_priority", '"{value}" is not a priority (urgent, high, normal or low)'),
    N_("bad_time", '"{value}" is not a time: use 21:30, 2026-12-24 08:00 or +2h'),
    N_("time_passed", '"{value}" has already passed'),
    N_("time_too_far", '"{value}" is more than {days} days ahead'),
    # Permissions and limits.
    N_("refused_role", "/{command} needs the {needed} role; you are {role}. Ask an admin."),
    N_("refused_conversation", "I don't take commands in this conversation; ask an admin to add "
                               "it to [chat] conversations."),
    N_("refused_not_owner", "batch {batch} was submitted by {owner}; only they or an admin may "
                            "{command} it."),
    N_("refused_admin_only", "only admins may {what}."),
    N_("limit_rows", "this sheet has {rows:,} rows; you may submit {limit:,} at a time."),
    N_("limit_queued", "you have {active:,} jobs queued or running; with these {rows:,} that "
                       "would pass your limit of {limit:,}."),
    N_("limit_rate", "you have submitted {count} times in the last minute (limit {limit}); try "
                     "again shortly."),
    # Priority is a privilege (bot.app.permissions: [chat] *_max_priority, /grant --priority).
    N_("refused_priority", "you may use priority {most} or lower, not {asked}; an admin can "
                           "raise yours: /grant {person} {person_role} --priority {asked}"),
    N_("granted_priority", "{user} is now {role}, and may use priority {priority}."),
    N_("help_priorities", "Your priorities: {priorities}."),
    # Delivery: what the bot posts about a batch.
    NP_("accepted", "Batch {batch} accepted: {count:,} {template} job. {ahead}; {eta}.",
        "Batch {batch} accepted: {count:,} {template} jobs. {ahead}; {eta}."),
    NP_("jobs_ahead", "{count:,} job ahead", "{count:,} jobs ahead"),
    N_("eta_minutes", "done in about {minutes:,} min"),
    N_("eta_unknown", "no estimate yet"),
    N_("progress", "Batch {batch} {bar} {done:,}/{total:,} done, {failed:,} failed{canceled}"),
    N_("progress_step", "row {row}: step {step}/{total}"),
    N_("batch_prefix", "Batch {batch} · "),
    N_("image_caption", "row {row} · {values}"),
    N_("image_caption_job", "row {row} · job {job} · {values}"),
    N_("image_caption_action", "row {row} · job {job} · {action} of job {parent} · {values}"),
    N_("job_failed", "row {row} failed: {error}"),
    N_("summary", "Batch {batch} finished in {took}: {succeeded:,} of {total:,} images, "
                  "{failed:,} failed, {canceled:,} canceled. {attached}"),
    N_("webhook_summary", "Batch {batch} ({template}) ended in {took}: {succeeded:,} of "
                          "{total:,} images, {failed:,} failed, {canceled:,} canceled."),
    N_("summary_version", " Made with {template}@{version}."),
    NP_("summary_deliver", "\nSales channels ({channels}): {count} file, {ships} ready to ship, "
                           "{held} held.",
        "\nSales channels ({channels}): {count} files, {ships} ready to ship, {held} held."),
    NP_("summary_deliver_more", "and {count} more that needs review",
        "and {count} more that need review"),
    N_("summary_deliver_link", "\nEvery file, its checks and the zip: {url}"),
    # What really happened (issue 42, item 4): a canceled batch says so; estimates say
    # what they wait for; jobs claimed ahead are next, not running.
    N_("summary_canceled", "Batch {batch} canceled after {took}: {canceled:,} of {total:,} jobs "
                           "canceled, {succeeded:,} made images, {failed:,} failed. {attached}"),
    N_("summary_all_canceled", "Batch {batch} canceled: all {total:,} jobs were canceled before "
                               "they made an image. {attached}"),
    N_("progress_canceled", "Batch {batch} {bar} canceled: {canceled:,} of {total:,} jobs "
                            "canceled, {succeeded:,} made images, {failed:,} failed"),
    N_("eta_paused", "starts when the queue is resumed"),
    N_("eta_no_executor", "waits for an executor"),
    N_("queue_counts_next", "{queued:,} queued, {next:,} next, {running:,} running"),
    N_("queue_next", "next on {holder}: jobs {jobs}"),
    N_("dash_eta_paused", "Starts when the queue is resumed"),
    N_("dash_eta_no_executor", "Waits for an executor"),
    N_("dash_up_next", "Up next (held by an executor, not started on yet)"),
    N_("dash_next", "next"),
    N_("dash_canceled_of", "Canceled: {canceled} of {total} jobs canceled, {succeeded} made "
                           "images, {failed} failed"),
    N_("chat_banner", "genbot chat as {who} ({role}). /help lists the commands; attach a file by "
                      "its path: /gen social_thumb social_thumb.xlsx (genbot template example "
                      "social_thumb -o social_thumb.xlsx writes one). Ctrl-D ends."),
    # genbot run and genbot chat: whose executor runs the jobs; a run that gives its batch up.
    N_("executor_served", "An executor already runs on this database ({executors}): the jobs "
                          "go to it, and this command starts none (--own-executor starts one)."),
    N_("run_made_by_running", "made by executor {executors}, already running on this database"),
    N_("run_stopped_by", "stopped by {signal}"),
    N_("run_timed_out", "batch {batch} waited {seconds:g} s for an executor (--timeout): {why}"),
    N_("run_why_paused", "the queue is paused (genbot queue resume goes on)"),
    N_("run_why_server_down", "ComfyUI server {servers} does not answer"),
    N_("run_why_no_executor", "no executor runs on this database"),
    N_("run_why_not_taken", "no executor took its jobs ({doing})"),
    N_("run_canceled", "genbot: {reason}; batch {batch} canceled."),
    N_("run_kept", "genbot: {reason}; batch {batch} stays queued (--keep-queued). To cancel it: "
                   "{command}"),
    N_("run_nothing_queued", "genbot: {reason}; nothing was queued."),
    # genbot run: what it says while it follows its batch, and at the end.
    N_("run_no_template", "genbot: no template '{name}' (have: {have})"),
    N_("run_cannot_read", "genbot: cannot read {file}: {error}"),
    N_("run_needs_comfyui", "genbot: {template} runs on ComfyUI: name your servers in [comfyui] "
                            "servers (genbot docs comfyui)"),
    NP_("run_batch", "batch {batch}: {count} job of {template} from {sheet}",
        "batch {batch}: {count} jobs of {template} from {sheet}"),
    N_("run_demo_note", "note: demo model ({models}) — images are noise; for real ones: "
                        "genbot docs models"),
    N_("run_executor_failed", "genbot: the executor could not start; its log: {log}"),
    N_("run_unrunnable", "genbot: no executor can run {what}; batch {batch} canceled"),
    N_("run_step", "row {row} {node} {step}/{total}"),
    N_("run_bar_failed", " · {count} failed"),
    N_("run_bar_canceled", " · {count} canceled"),
    N_("run_taken_by", "taken by executor {executors} (a running genbot service's)"),
    N_("run_starting", "starting the executor"),
    N_("run_waiting_executor", "waiting for an executor"),
    N_("run_first_step", "waiting for the first step"),
    N_("run_executor_ready", "executor ready"),
    N_("run_job_ended", "row {row}: {status}: {error}"),
    N_("run_no_images", "no images; the executor's log: {log}"),
    N_("run_made_by_both", "made by executor {executors}: a genbot service on this queue took "
                           "the jobs before this command's executor did"),
    N_("run_made_here", "made here, by this command's executor ({executors})"),
    NP_("run_images_in", "{count} image in {folder}", "{count} images in {folder}"),
    N_("run_contact", "contact sheet: {path}"),
    N_("run_grid", "grid: {path}"),
    NP_("run_channel_files", "{count} file for {channels} in {folder}",
        "{count} files for {channels} in {folder}"),
    N_("run_copied", "copied to {folder}"),
    N_("contact_row", "row {row}"),
    N_("took_seconds", "{seconds:.0f} s"),
    N_("took_minutes", "{minutes:.1f} min"),
    N_("attached_both", "Contact sheet and results sheet attached."),
    N_("attached_results", "Results sheet attached."),
    N_("attached_filled", " And {name} as you sent it, each row's files and status filled in "
                          "on the right."),
    N_("digest", "genbot, the last 24 hours: {batches:,} batches submitted; {succeeded:,} images "
                 "made, {failed:,} failed, {canceled:,} canceled{mean}. Now: {queued:,} "
                 "queued{paused}."),
    N_("digest_mean", ", {seconds:.1f} s each on average"),
    N_("digest_paused", ", the queue is paused"),
    N_("digest_top", " Most images: {who}."),  # (after the digest, in its paragraph)
    NP_("accepted_at", "Batch {batch} accepted: {count:,} {template} job, to start at {at}.",
        "Batch {batch} accepted: {count:,} {template} jobs, to start at {at}."),
    N_("retry_of", " (a retry of batch {batch}'s failed jobs)"),
    N_("batch_started", "Batch {batch}: started — {total:,} images on their way"),
    N_("milestone", "Batch {batch}: {percent}% — {done:,}/{total:,} done, {failed:,} "
                    "failed{canceled}"),
    N_("button_cancel", "Cancel batch"),
    N_("button_keep", "Keep it"),
    N_("confirm_cancel", "Cancel batch {batch}? Queued jobs end now, a running one at its next "
                         "step."),
    N_("undelivered", "I could not post {what} here: {error}"),
    N_("what_image", "the image of row {row}"),
    N_("what_message", "a message"),
    N_("col_row", "row"),
    N_("col_status", "status"),
    N_("col_output", "output"),
    N_("col_error", "error"),
    N_("col_job", "job"),
    N_("col_parent", "made from job"),
    N_("col_action", "action"),
    N_("col_instruction", "instruction"),
    N_("col_mask", "mask"),
    N_("col_canvas", "extended by"),
    N_("col_rating", "review"),
    N_("col_review_note", "review note"),
    N_("col_stars", "stars"),
    N_("col_signed_off", "Signed off by {by} at {at}"),
    N_("col_model", "model"),
    N_("col_version", "template version"),
    N_("col_swept", "swept values"),
    NP_("picks", "Picks of batch {batch}: {count} kept image, with its values to run it again "
                 "exactly.",
        "Picks of batch {batch}: {count} kept images, with their values to run them again "
        "exactly."),
    N_("picks_none", "Batch {batch} has no kept images yet: keep some with ⭐ or /keep ROW."),
    N_("help_picks", "the kept images of a batch and what was made from it, as a contact sheet "
                     "and a results sheet"),
    # Replies to commands.
    N_("internal_error", "Something went wrong on my side with that (ref {ref}); an admin can "
                         "find it in the log."),
    N_("file_received", "Got {names}. To run a sheet: /gen TEMPLATE {name} (/templates lists the "
                        "templates)."),
    N_("images_received", "Got {names}; a sheet's rows can name them."),
    N_("unknown_template", 'no template "{name}"; templates: {names}'),
    N_("unknown_template_close", 'no template "{name}" — did you mean {close}? Templates: {names}'),
    N_("no_sheet", "I have no spreadsheet from you. Send one (.xlsx, .csv …), then type /gen "
                   "{template} FILE."),
    N_("file_not_found", 'I have no file "{file}" from you.'),
    N_("file_ambiguous", "Several spreadsheets came with this message ({names}); name one: /gen "
                         "{template} FILE"),
    N_("file_hint_dm", "Send the file to me in a direct (1:1) chat first; then /gen here can "
                       "name it."),
    N_("file_hint_discord", "Attach the sheet to /gen (its sheet option), or send it to me "
                            "first in a message that mentions me; then /gen can name it."),
    N_("slash_template", "the template: start typing its name"),
    N_("slash_file", "the file the command takes (a mask, a workflow)"),
    N_("slash_sheet", "the sheet: one job per row"),
    N_("slash_picture", "a picture the sheet's rows name (by its file name)"),
    N_("button_expired", "genbot no longer keeps the message this button is under (it was "
                         "cleared away with its batch): type its command instead."),
    N_("button_sure", "{label}: are you sure?"),
    N_("button_yes", "Yes"),
    N_("file_hint_feishu", "Send the file to me first — in our chat, or in this group's thread "
                           "— then /gen here can name it."),
    N_("recent_files", "Files you sent lately: {files}"),
    N_("file_age", "{name} ({minutes:,} min ago)"),
    N_("download_html", 'could not fetch "{file}": Slack sent its sign-in page instead of the '
                        "file (the bot token is wrong or lacks files:read)"),
    N_("download_size", 'could not fetch "{file}" whole: got {got:,} bytes of {expected:,}; send '
                        "it again"),
    N_("download_failed", 'could not fetch "{file}": {reason}'),
    NP_("dry_run", "Dry run: {count:,} {template} job would be queued; nothing was queued.",
        "Dry run: {count:,} {template} jobs would be queued; nothing was queued."),
    N_("queue_full", "The queue has room for {free:,} more jobs (limit {limit:,}) but this sheet "
                     "has {requested:,}: nothing was queued."),
    N_("no_batches", "You have no batches yet."),
    N_("no_batch", "There is no batch {batch}."),
    N_("no_job", "There is no job {job}."),
    N_("template_name_bad", "{name} cannot be a template name: letters, digits, _ and -, up to "
                            "64, starting with a letter or digit."),
    N_("template_dir_unset", "Imported templates need a folder of their own: set [templates] dir "
                             "(copy the shipped ones there to keep them)."),
    N_("template_exists", "There is a template {name} already; add --replace to replace it."),
    N_("workflow_refused", "The workflow cannot be imported: {why}"),
    N_("object_info_failed", "Cannot read the node list of ComfyUI server {server}: {why}."),
    N_("template_imported", "Template {name}@{version} imported from {how} of {file}. Its "
                            "columns:\n{columns}\nNext: /template {name} for an example sheet."),
    N_("template_import_file", "Send the workflow first (a .json file, or a PNG ComfyUI saved), "
                               "then /template import NAME [FILE]."),
    N_("no_delivery", "There is no webhook delivery {delivery}."),
    N_("no_endpoint", "There is no webhook endpoint {endpoint} (configured: {endpoints})."),
    N_("delivery_owed", "Webhook delivery {delivery} is still being sent; it is retried on its "
                        "own."),
    N_("callback_url_bad", "The callback URL {url} cannot be used: expected http(s)://host/path, "
                           "without a user or password, at most {most:,} characters."),
    N_("callback_url_unresolved", "The callback URL's host {host} has no address (DNS cannot "
                                  "find it)."),
    N_("callback_url_private", "The callback URL's host {host} is a private, loopback or "
                               "link-local address (or resolves to one); genbot posts only to "
                               "public hosts unless [webhook] callback_allowlist names it."),
    N_("status", "Batch {batch} · {template} · {owner}\n{bar} {done:,}/{total:,} done, "
                 "{failed:,} failed{canceled}; {queued:,} queued, {running:,} running"),
    N_("and_canceled", ", {canceled:,} canceled"),
    NP_("status_waiting", "{count:,} job ahead; {eta}", "{count:,} jobs ahead; {eta}"),
    N_("status_at", "starts at {at}"),
    N_("queue_paused", "The queue is paused (by {by}): running jobs finish, none start."),
    N_("queue_running", "The queue is running."),
    N_("queue_counts", "{queued:,} queued, {running:,} running"),
    N_("queue_eta", "all queued jobs {eta}"),
    N_("queue_job", "job {job}: batch {batch} · {template} · row {row} · {minutes:.1f} min"),
    N_("queue_worker_busy", "executor {name} ({device}): job {job}"),
    N_("queue_worker_idle", "executor {name} ({device}): idle"),
    N_("queue_worker_lost", "executor {name} ({device}): lost, silent for {minutes:.0f} min"),
    N_("queue_worker_building_demo", " · building demo models: {models}"),
    N_("queue_worker_loading", " · loading {models}"),
    N_("queue_worker_server_down", " · server down: {models}"),
    N_("queue_worker_cannot", "  {name} cannot run {template}: {why}"),
    N_("queue_worker_takes", " · takes {models}"),
    N_("queue_unplaced", "{jobs:,} queued jobs need {model}, which no running executor takes."),
    N_("status_unplaced", "Waiting: no running executor can run {what} ({why}); it runs once one "
                          "that can is started."),
    N_("unplaced_notice", "Batch {batch} is waiting: no running executor can run {what} ({why}). "
                          "It runs once one that can is started; /cancel {batch} to drop it."),
    N_("demo_note", " Demo model ({models}) — images are noise; for real ones: genbot docs "
                    "models."),
    N_("queue_executor_starting", "The executor is starting: queued jobs begin once it is up."),
    N_("queue_no_workers", "No executor is running: queued jobs wait until one starts."),
    N_("canceled", "Canceled: {ended:,} queued jobs ended, {asked:,} running told to stop."),
    N_("nothing_to_cancel", "Nothing to cancel: no queued or running jobs there."),
    N_("retried", "Batch {batch}: its {jobs:,} failed jobs go again as batch {new}."),
    N_("retried_already", "Batch {batch}'s failed jobs are already being retried as batch {new}."),
    # Iterating on images: keep, reject, again, vary, upscale, edit.
    N_("action_unknown", '"{action}" is not an action; use one of: {actions}.'),
    N_("action_count", "Ask for 1 to {max} images at a time, not {count}."),
    N_("action_count_one", "{action} makes one image; leave the count out."),
    N_("action_not_finished", "Job {job} is {status}: wait until it has finished."),
    N_("action_no_image", "Job {job} has no image to use ({status}); pick a finished image."),
    N_("action_outputs_gone", "The images of batch {batch} were deleted (auto_save is off or "
                              "retention removed them): job {job} can no longer be varied or "
                              "upscaled. Use again or edit, which make it anew."),
    N_("action_template_gone", 'Template "{template}" is no longer loaded: the image cannot be '
                               "made again. Ask an admin to restore it."),
    N_("action_batch_gone", "Batch {batch} of job {job} is gone (retention removed it)."),
    N_("action_no_batch", "There is no batch here yet: reply in a batch's thread, or name the "
                          "image as job N (its caption shows it)."),
    N_("action_no_row", "Batch {batch} has no row {row}; its rows are {rows}."),
    N_("action_no_seed", 'Template "{template}" has no seed parameter: again would make the same '
                         "image. Use edit to change a value."),
    N_("vary_no_image", 'Template "{template}" (ComfyUI) has no image input to feed the picture '
                        "into, so it cannot vary one; use again for new seeds."),
    N_("edit_both", "An edit changes either the row's values (KEY=VALUE) or the image by an "
                    "instruction, not both at once: send them as two edits."),
    N_("edit_no_model", "No model here edits an image by instruction: add one to [models] "
                        "(FLUX.1 Kontext: genbot models pull black-forest-labs/FLUX.1-Kontext-dev "
                        "--write; or Qwen-Image-Edit) or name it in [templates] edit_model."),
    N_("edit_model_unknown", 'Model "{model}" is not in [models]: name one of its models, or '
                             "set [templates] edit_model to one."),
    N_("instruction_too_long", "The instruction is {chars:,} characters; it may be {max:,} "
                               "([intake] max_cell_chars)."),
    N_("vary_no_img2img", 'Model "{model}" is {label} ({family}), which cannot start from an '
                          "image (genbot runs it for {modes}), so it cannot vary one; use "
                          "again for new seeds, or edit to name another model."),
    N_("fill_no_model", "No model here repaints part of an image: add one whose family inpaints "
                        "to [models] (FLUX.1 Fill: genbot models pull "
                        "black-forest-labs/FLUX.1-Fill-dev --write; or an SD, SDXL, FLUX.1, "
                        "Qwen-Image or Z-Image model) or name it in [templates] fill_model."),
    N_("fill_model_unknown", "Model \"{model}\" is not in [models]: name one of its models, or set "
                             "[templates] fill_model to one."),
    N_("fill_cannot_run", "Model \"{model}\" is {label} ({family}), which cannot repaint part of an "
                          "image (genbot runs it for {modes}): name one that inpaints, or set "
                          "[templates] fill_model to one."),
    N_("repaint_no_mask", "Repaint needs a mask: a picture of the image's shape, white where to "
                          "repaint and black where to keep; or the region in words, "
                          "region=WORDS, where a segmentation model is configured."),
    N_("region_no_model", "No model here finds a region named in words: add a CLIPSeg model to "
                          "[models] (genbot models pull CIDAS/clipseg-rd64-refined --write) and "
                          "name it in [templates] segmentation_model, or send a mask picture."),
    N_("region_model_unknown", "Model \"{model}\" is not in [models]: set [templates] "
                               "segmentation_model to one of its models."),
    N_("region_too_long", "The region is {chars:,} characters; name it in at most {max:,} (a few "
                          "words: \"the bottle\", \"瓶子\")."),
    N_("action_takes_no_region", "{action} takes no region: only repaint does."),
    N_("extend_nothing", "Say how to extend: a shape (/extend 3 9:16) or pixels to add on a side "
                         "(left=256 right=256)."),
    N_("extend_margin", "{value} px is not a margin an extend adds: 0 to {max:,} px on a side."),
    N_("extend_aspect", "\"{value}\" is not a shape: write width:height, such as 9:16 or 1:1."),
    N_("action_takes_no_mask", "{action} takes no mask: only repaint does."),
    N_("action_takes_no_margins", "{action} takes no margins or shape: only extend does."),
    N_("mask_one_image", "A mask belongs to one image: repaint the images one by one, not a "
                         "whole batch's kept ones."),
    N_("mask_not_image", "The mask is not a picture genbot can read: send a PNG, JPEG or WebP, "
                         "white where to repaint."),
    N_("mask_too_large", "The mask is {width}x{height}; masks may have {max:g} megapixels at "
                         "most ([intake] max_output_pixels)."),
    N_("mask_shape", "The mask is {width}x{height} and the image "
                     "{image_width}x{image_height}: a mask of the image's proportions is "
                     "resized to it, one of other proportions would repaint the wrong place. "
                     "Paint it on the image, or make it {image_width}x{image_height}."),
    N_("mask_empty", "The mask marks nothing to repaint (it is black all over): paint white "
                     "where to repaint."),
    N_("mask_full", "The mask covers the whole image: to make it anew use again; paint "
                    "white only where to repaint."),
    N_("picture_not_found", "No picture \"{file}\" was sent here lately: send it (PNG, JPEG or WebP), "
                            "then the command again."),
    N_("picture_none", "Send the mask picture (PNG, JPEG or WebP: white where to repaint, "
                       "black where to keep) with the command, or send it and then name it: "
                       "{command} mask.png."),
    N_("vary_no_model", 'Template "{template}" generates nothing (no model step), so it cannot '
                        "vary an image; use upscale or edit."),
    N_("action_too_large", "That would be a {width}x{height} image ({megapixels:,.0f} "
                           "megapixels); the limit is {max:,.0f} megapixels ([intake] "
                           "max_output_pixels): ask for less upscaling or a smaller size."),
    N_("vary_strength_comfy", 'Template "{template}" runs a ComfyUI workflow, whose own denoise '
                              "sets how far a variation goes: leave the strength out."),
    N_("vary_count_no_seed", 'Template "{template}" has no seed parameter: its variations of one '
                             "image would all be the same. Ask for one."),
    N_("vary_strength", "A vary strength is above 0 and at most 1 (0.35 changes details), not "
                        "{value}."),
    N_("upscale_factor", "An upscale factor is more than 1 and at most {max:g}, not {value}."),
    N_("edit_unknown", '"{key}" is not a value of this template; it has: {names}.'),
    N_("edit_image", '"{key}" is a picture: it cannot be changed by an edit; submit a sheet with '
                     "the new picture instead."),
    N_("edit_value", "{key}: {problem}"),
    N_("edit_usage", "Row {row} (job {job}) has: {values}\nChange any with {command} {job_ref} "
                     "KEY=VALUE …, e.g. {command} {job_ref} {example}"),
    N_("edit_usage_sentence", "Or change the image itself in a sentence: {command} {job_ref} "
                              "把背景换成海滩"),
    N_("edit_form_title", "Edit row {row}"),
    N_("edit_form_submit", "Run"),
    N_("edit_form_instruction", "Change the image itself, in a sentence (or change the "
                                "values below instead)"),
    N_("edit_pair", '"{value}" is not KEY=VALUE (e.g. steps=30, prompt="a red bottle").'),
    N_("rating_unknown", '"{rating}" is not a rating: keep, reject or unkeep.'),
    NP_("acted", "{action}: {count} new image of row {row} (job {job}) queued as batch {batch}; "
                 "it comes into this thread.",
        "{action}: {count} new images of row {row} (job {job}) queued as batch {batch}; they "
        "come into this thread."),
    N_("acted_already", "{action} of job {job} was asked a moment ago: batch {batch} is on it."),
    NP_("acted_kept", "{action}: {count:,} new image from the kept image of batch {of_batch} "
                      "queued as batch {batch}; it comes into this thread.",
        "{action}: {count:,} new images from the {count:,} kept images of batch {of_batch} "
        "queued as batch {batch}; they come into this thread."),
    N_("acted_kept_already", "{action} of the kept images of batch {of_batch} was asked a "
                             "moment ago: batch {batch} is on it."),
    N_("image_ref_batch", "b{batch} names a whole batch, and /{command} takes one image: name "
                          "it by ROW or jJOB."),
    N_("edit_kept_usage", "Say what to change on every kept image of batch {batch}: "
                          "/edit b{batch} KEY=VALUE … (the rows' values) or a sentence (the "
                          "images themselves)."),
    N_("kept", "⭐ Kept row {row} (job {job})."),
    N_("rejected", "👎 Rejected row {row} (job {job})."),
    N_("unkept", "Row {row} (job {job}) is no longer kept or rejected."),
    N_("kept_because", "⭐ Kept row {row} (job {job}): {note}"),
    N_("rejected_because", "👎 Rejected row {row} (job {job}): {note}"),
    N_("changes_queued", "✏️ Changes requested on row {row} (job {job}): {note}\n{action} "
                         "queued as batch {batch}; it comes into this thread."),
    N_("changes_need_note", "Say what should change: /changes ROW what to change (e.g. "
                            "/changes 3 把背景换成海滩)."),
    N_("changes_cannot", "Job {job}'s template {template} can neither be edited by a sentence "
                         "(no edit model is configured) nor tried again (it has no seed): "
                         "reject it with the reason instead."),
    N_("review_note_too_long", "A note is at most {most} characters; this one has {chars}."),
    N_("stars_range", '"{stars}" is not a grade: 1 to {most} stars, or none.'),
    N_("batch_signed_off", "Batch {batch} was signed off by {by}: its reviews are final. An "
                           "admin may reopen it (/reopen {batch})."),
    NP_("signoff_unreviewed", "Batch {batch} cannot be signed off yet: {count} of its {total} "
                              "images is not reviewed.",
        "Batch {batch} cannot be signed off yet: {count} of its {total} images are not "
        "reviewed."),
    NP_("signoff_unfinished", "Batch {batch} cannot be signed off yet: {count} job is still "
                              "to run.",
        "Batch {batch} cannot be signed off yet: {count} jobs are still to run."),
    N_("signoff_nothing", "Batch {batch} made no image: there is nothing to sign off."),
    N_("starred", "Row {row} (job {job}): {stars}"),
    N_("help_stars", "grade an image 1 to 5 stars (none takes the grade back)"),
    N_("signed_off", "✅ Batch {batch} signed off by {by}: {summary}."),
    N_("reopened", "🔓 Batch {batch} is open for review again."),
    NP_("moved", "{what}: {count} waiting job moved to the {where} of its submitter's queue; "
                 "other people's turns are as they were.",
        "{what}: {count} waiting jobs moved to the {where} of its submitter's queue; other "
        "people's turns are as they were."),
    N_("move_front", "front"),
    N_("move_back", "back"),
    N_("move_where", '"{to}" is not a place to move to: front or back.'),
    N_("move_nothing", "Nothing of {what} is waiting (claimed ahead, running or done): there "
                       "is nothing to move."),
    N_("reopen_not_signed", "Batch {batch} is not signed off: there is nothing to reopen."),
    # each review state (storage.reviews), as a results sheet, a summary and the dashboard say it
    N_("review_approved", "approved"),
    N_("review_rejected", "rejected"),
    N_("review_changes_requested", "changes requested"),
    N_("review_unreviewed", "unreviewed"),
    N_("review_count", "{count} {state}"),
    # reasons offered for a rejection (the dashboard's list; any words may be typed instead)
    N_("reason_product", "Product changed"),
    N_("reason_text", "Text wrong or misspelt"),
    N_("reason_artifacts", "Artifacts (hands, edges, noise)"),
    N_("reason_brand", "Off brand (colour, style)"),
    N_("reason_composition", "Composition or crop"),
    # each image action's verb (templates.actions.ACTIONS; on a button after its icon)
    N_("verb_again", "Again"),
    N_("verb_vary", "Vary"),
    N_("verb_upscale", "Upscale"),
    N_("verb_edit", "Edit"),
    N_("verb_repaint", "Repaint"),
    N_("verb_extend", "Extend"),
    # … and what it makes, as a line of the CLI's help (genbot job --help)
    N_("about_again", "the same row with new seeds"),
    N_("about_vary", "close variations of the image"),
    N_("about_upscale", "the image enlarged"),
    N_("about_edit", "the row again with some values changed"),
    N_("about_repaint", "a region of the image repainted, the rest kept exactly"),
    N_("about_extend", "the canvas grown to a shape or by margins, the image kept exactly"),
    N_("button_keep_image", "⭐ Keep"),
    N_("button_reject_image", "👎 Reject"),
    N_("reject_form_title", "Reject row {row}"),
    N_("reject_form_reason", "Why? (optional: e.g. the label is misspelt)"),
    # Sweeps: --vary and --seeds.
    N_("sweep_value", "--vary {key}: {problem}"),
    N_("sweep_syntax", '"{value}" is not KEY=V1,V2,… or KEY=START..STOP:STEP (e.g. steps=20,30 '
                       "or guidance=3..7:2)."),
    N_("sweep_unknown", '--vary "{key}": this template has no such value; it has: {names}.'),
    N_("sweep_image", '--vary "{key}": a picture cannot be swept; put each picture on its own '
                      "row of the sheet."),
    N_("sweep_twice", '--vary "{key}" is given twice: list all its values once (KEY=V1,V2,V3).'),
    N_("sweep_empty_value", '--vary "{key}" has an empty value: remove the extra comma.'),
    N_("sweep_values", '--vary "{key}" has {count:,} values; at most {max} on one axis.'),
    N_("sweep_step", "--vary \"{key}\": a range's step is more than 0."),
    N_("sweep_backwards", '--vary "{key}": the range {start}..{stop} runs backwards; write the '
                          "smaller number first."),
    N_("sweep_seeds", "--seeds is 1 to {max}, not {value}."),
    N_("sweep_no_seed", 'Template "{template}" has no seed parameter: --seeds would make the '
                        "same image again."),
    N_("sweep_too_big", "This sweep makes {jobs:,} jobs; at most {max:,} at a time: sweep fewer "
                        "values."),
    N_("sweep_confirm", "This sweep makes {jobs:,} jobs ({rows:,} rows × {each:,} each) on "
                        "{models}; at the recent pace, {eta}. To queue them, send the same "
                        "command with --yes:\n{command}"),
    N_("no_version", 'Template "{name}" has no version {number}; its latest is {latest} (genbot '
                     "template history {name})."),
    N_("no_label", 'Template "{name}" has no version labelled "{label}" (labels: {labels}).'),
    N_("refine_not_sweep", "Batch {batch} is no sweep: /refine narrows a sweep (/gen … --vary …) "
                           "from its ratings."),
    N_("refine_no_ratings", "Nothing of batch {batch} is rated yet: keep (⭐) the images you like "
                            "and reject (👎) the others, then /refine {batch}."),
    NP_("refine_head", "Batch {batch}: {count} image rated. Kept, by value:",
        "Batch {batch}: {count} images rated. Kept, by value:"),
    N_("refine_value", "  {param} = {value}: kept {kept} of {rated} rated ({percent}){best}"),
    N_("refine_best", " ← best"),
    N_("refine_unrated", "  {param}: not rated, kept as it was"),
    N_("refine_next", "Next, narrowed around the best:\n{command}"),
    N_("button_run_it", "Run it"),
    N_("help_refine", "from a sweep's ratings, the keep rate of each value and the next, "
                      "narrower sweep to run"),
    N_("grid_title", "row {row}{page}"),
    N_("sweep_grid", '--grid "{key}" is not one of the swept values ({axes}).'),
    N_("sweep_grid_count", "--grid names one or two of the swept values, across then down."),
    N_("ab_not_compare", "Batch {batch} compares nothing: /ab tallies a batch made with /gen "
                         "NAME@A NAME@B FILE --compare."),
    NP_("ab_head", "Batch {batch}, {rated} of {count} row rated:",
        "Batch {batch}, {rated} of {count} rows rated:"),
    NP_("ab_won", "  {variant}: kept in {count} row where the other was not",
        "  {variant}: kept in {count} rows where the other was not"),
    N_("ab_ties", "  tie (both or neither kept): {ties}"),
    NP_("ab_unrated", "  not rated yet: {count} row", "  not rated yet: {count} rows"),
    N_("help_webhooks", "admins: webhook endpoints and their deliveries; test one, resend one"),
    N_("webhooks_none", "No webhook endpoints: add [[webhooks]] to the config, or submit with a "
                        "callback URL."),
    N_("webhooks_head", "{count} webhook endpoints:"),
    N_("webhooks_endpoint", "  {endpoint} {url}: {sent:,} sent, {pending:,} pending, {failed:,} "
                            "failed{off}"),
    N_("webhooks_disabled", " — disabled: {why}"),
    N_("webhooks_usage", "/webhooks lists the endpoints; /webhooks test ENDPOINT sends a test; "
                         "/webhooks redeliver DELIVERY sends one again."),
    N_("webhook_sent", "Delivery {delivery} ({type}) to {endpoint}: taken (HTTP {status})."),
    N_("webhook_not_sent", "Delivery {delivery} ({type}) to {endpoint} was not taken ({state}): "
                           "{error}"),
    N_("help_ab", "an A/B batch's tally: the rows each version won by keeps"),
    N_("compare_param", 'Template "{template}" needs {names}, which "{other}" does not have: '
                        "compare versions that take the same values."),
    N_("compare_too_many", "{count} versions to compare; at most 26 (A to Z)."),
    N_("compare_needs_two", "--compare runs each row through two templates or versions: /gen "
                            "NAME@3 NAME@4 FILE --compare."),
    # Sales channels (templates.channels): a submission's channels, a row's renditions.
    N_("channel_unknown", 'No sales channel "{name}". Channels: {names}.'),
    N_("channel_unknown_close", 'No sales channel "{name}" — did you mean "{close}"? Channels: '
                                "{names}."),
    N_("channel_words", '{channel}\'s "{rendition}" file allows no words in the picture, and this '
                        "template writes some ({ops}): choose another template or channel, or "
                        "give the channel a rendition that allows words ([deliver] channels)."),
    N_("channel_label_words", '{channel}\'s "{rendition}" file allows no words in the picture, '
                              "and its visible AI label would be drawn on it: an admin may leave "
                              "the label off {channel}'s files ([deliver] unlabelled) where the "
                              "law allows."),
    N_("channel_extend_comfy", '{channel}\'s "{rendition}" file grows the picture to its shape '
                               "on the fill model, which genbot cannot add to a ComfyUI "
                               "workflow: choose a channel file that crops or pads, or a "
                               "genbot template."),
    N_("channel_extend_no_model", '{channel}\'s "{rendition}" file grows the picture to its '
                                  "shape on a fill model, and none is set up: an admin names "
                                  "one in [templates] fill_model (or adds a model that "
                                  "inpaints to [models])."),
    N_("channel_no_column", '{file}: channel {channel} names its files by "{{{field}}}", and the '
                            'sheet has no "{field}" column: add one, or change the channel\'s '
                            "file pattern ([deliver] channels)."),
    N_("channel_file_broken", "The team's channels file cannot be used now: {error}. An admin "
                              "can fix it ([deliver] channels)."),
    N_("channel_empty_field", "channel {channel} names its files by this column, and it is "
                              "empty here"),
    NP_("channel_files_repeat", '{count} file name repeats one an earlier row gives (row {row}: '
                                '"{file}", as row {first}): the later gets -2, -3 … before its '
                                "extension",
        '{count} file names repeat ones earlier rows give (first, row {row}: "{file}", as row '
        "{first}): the later get -2, -3 … before their extension"),
    # genbot channels: what --channels and --layout take here.
    N_("cli_channel", "{name}: {title} (visible AI label: {label})"),
    N_("cli_rendition", "  {name}: {width}×{height}, {fit}, {format} → {file}"),
    N_("cli_layout", "layout {name}: {title} — aspects {aspects}; locales {locales}; reads "
                     "{columns}"),
    N_("cli_layout_broken", "layout {name} cannot be used: {error}"),
    N_("label_required", "required"),
    N_("label_optional", "optional"),
    N_("label_off", "off ([deliver] unlabelled)"),
    # Layouts (templates.layouts): the words, price, badge and logo on a channel's files.
    N_("layout_unknown", 'No layout "{name}". Layouts: {names}.'),
    N_("layout_unknown_close", 'No layout "{name}" — did you mean "{close}"? Layouts: {names}.'),
    N_("layout_broken", "The layout cannot be used: {error}. Whoever keeps the team's layouts "
                        "can fix it (the assets folder's layouts/)."),
    N_("layout_no_column", '{file}: layout {layout} reads the column "{field}", and the sheet has '
                           "none: add it, or choose another layout."),
    N_("layout_overflow", '"{words}" does not fit its box in {rendition} ({size}) even at '
                          "{min} px: shorten it, or give the layout a larger box"),
    N_("layout_empty_field", "layout {layout} puts this column in the picture, and it is empty "
                             "here"),
    N_("layout_price", '"{value}" is not a price: write a number, such as 129 or 129.90'),
    N_("layout_locale_unknown", 'layout {layout} has no locale "{locale}": {known}'),
    N_("layout_logo_missing", 'no logo "{name}" in the assets folder: add the file, or fix the '
                              "name"),
    N_("layout_logo_not_image", '"{name}" is not a picture a logo can be drawn from: use a PNG, '
                                "JPEG or WebP file"),
    # What a rendition's checks found (templates.deliver_checks): "needs review" and why.
    N_("rendition_needs_review", "{name} — needs review: {why}"),
    N_("col_channel_files", "{channel} files"),
    N_("check_size", "{width}×{height}, not {want_width}×{want_height}"),
    N_("check_nsfw", "unsafe content found ({parts}, {percent}% sure): a person must look"),
    N_("check_text", 'the picture should read "{want}", and reads "{read}" ({percent}% alike)'),
    N_("check_words", 'words in a picture whose channel allows none: "{read}"'),
    N_("check_product", "the product differs from its photo: {percent}% of its pixels kept, "
                        "{want}% wanted"),
    N_("check_format", "saved as {found}, not {want}"),
    N_("check_file_size", "{kib} KiB, over the channel's {max_kib} KiB even at the lowest "
                          "quality"),
    N_("check_profile", "no sRGB colour profile in the file"),
    N_("check_background", "the background is not pure white: {percent}% of the edge is RGB "
                           "255, and the channel asks for all of it"),
    N_("check_fill", "the product spans {percent}% of the frame; the channel asks for {want}%"),
    N_("check_no_product", "no product found on a plain background (the channel measures how "
                           "much of the frame it fills)"),
    N_("check_label_missing", "the visible AI label could not be drawn"),
    N_("check_label_small", "the visible AI label is {percent}% of the short side high; the "
                            "channel asks for {want}%"),
    N_("check_implicit_label", "the AI-content label in the file's metadata is missing"),
    N_("check_c2pa", "its C2PA Content Credentials do not validate ({codes})"),
    N_("check_unreadable", "the file cannot be read back as an image ({error})"),
    # Sweeps and A/B in chat: a typo's closest key, a version against itself, a row's images.
    N_("sweep_unknown_close", '--vary "{key}": this template has no such value — did you mean '
                              '"{name}"? It has: {names}.'),
    N_("compare_same", '--compare: {a} and {b} are the same version of "{template}", so only '
                       "chance would tell them apart. Compare two versions (genbot template "
                       "history {template} lists them): /gen NAME@3 NAME@4 FILE --compare."),
    N_("row_images", "Row {row} of batch {batch} has {count} images; name the one you mean by "
                     "its job, as in {example}:\n{choices}"),
    # genbot queue's lines (English, as the command line writes; a count's own plural).
    NP_("cli_canceled", "canceled {count} queued job", "canceled {count} queued jobs"),
    NP_("cli_asked", "asked {count} running job to stop", "asked {count} running jobs to stop"),
    NP_("cli_handed_back", "handed back {count} job: {jobs}; it runs again (no attempt used), and "
                           "its holder stops it at its next heartbeat",
        "handed back {count} jobs: {jobs}; they run again (no attempt used), and their holders "
        "stop them at their next heartbeat"),
    NP_("cli_stuck", "{count} job looks stuck: {command} (or --hand-back-stuck) puts it back in "
                     "the queue",
        "{count} jobs look stuck: {command} (or --hand-back-stuck) puts them back in the queue"),
    N_("sweep_no_models", "no model (image operations only)"),
    N_("button_yes_queue", "Queue {jobs:,} jobs"),
    N_("nothing_to_retry", "Batch {batch} has no failed jobs."),
    N_("paused_now", "Paused: no new jobs start; running ones finish. /resume goes on."),
    N_("paused_already", "The queue was already paused."),
    N_("resumed_now", "Resumed: jobs start again."),
    N_("resumed_already", "The queue was not paused."),
    N_("doctor_none", "No job is leased now: nothing claimed ahead, nothing running."),
    N_("doctor_head", "{count} leased jobs, the quietest first; {stuck} look stuck (no sign of "
                      "life for {minutes:.0f} min, or held by an executor that is gone):"),
    N_("doctor_ahead", "job {job} (batch {batch}, row {row}) claimed ahead by {holder} "
                       "({state}), waiting {minutes:.1f} min"),
    N_("doctor_running", "job {job} (batch {batch}, row {row}) running on {holder} ({state}), no "
                         "progress for {minutes:.1f} min"),
    N_("doctor_quiet", " — STUCK"),
    N_("doctor_holder_gone", " — STUCK: its executor is gone"),
    N_("doctor_how", "/doctor JOB … hands those jobs back to the queue (no attempt used); "
                     "/doctor stuck hands back every stuck one."),
    N_("doctor_handed_back", "Handed back {count} jobs ({jobs}): they run again, no attempt "
                             "used; whoever held them stops at its next heartbeat."),
    N_("doctor_nothing_handed", "None of those jobs is leased now: nothing was handed back."),
    N_("templates_list", "Templates (/template NAME for columns and an example sheet):"),
    N_("template_info", "{name}: {description}\nColumns (* required):\n{columns}\nAn example "
                        "sheet is attached."),
    N_("template_pictures", "Its rows name genbot's example pictures ({names}), attached below: "
                            "send the sheet back as it is with /gen {name} to try it, or send "
                            "your own pictures with it."),
    N_("bad_timezone", '"{value}" is not a time zone: use an IANA name such as Asia/Shanghai or '
                       "UTC"),
    N_("bad_cron", '"{value}" is not a cron line: five fields, minute hour day month weekday, '
                   'e.g. "0 9 * * 1-5"'),
    N_("scheduled", 'Schedule {id}: {template} from {sheet} at "{cron}" ({zone}); next run '
                    "{next}."),
    N_("schedules_none", "No recurring batches."),
    N_("schedule_line", '{id}: {template} from {sheet} at "{cron}" ({zone}), by {by}; next {next}'),
    N_("unscheduled", "Schedule {id} removed."),
    N_("no_schedule", "There is no schedule {id}."),
    N_("granted", "{user} is now {role}."),
    N_("revoked", "{user}'s granted role is removed; they are now {role}."),
    N_("revoke_none", "{user} has no granted role."),
    N_("revoke_config_admin", "{user} is an admin in the config; /revoke cannot change that."),
    # /help
    N_("help_intro", "Commands (also without the slash, or after @genbot):"),
    N_("help_gen", "queue one image job per row of a sheet you sent me"),
    N_("help_status", "progress of a batch (default: your latest)"),
    N_("help_queue", "what is queued and running, and whether the queue is paused"),
    N_("help_cancel", "cancel a batch, one job, all your batches, or everything (admins)"),
    N_("help_again", "the same row with new seeds (N images); ROW as captioned, or job N"),
    N_("help_vary", "N close variations of an image"),
    N_("help_upscale", "enlarge an image (2×, or the factor given)"),
    N_("help_edit", "change a row's values (prompt, steps, seed …) and run it again; without "
                    "values, show them"),
    N_("help_repaint", "repaint a region: send a mask picture with it (white where to repaint), "
                       "or name it in words (region=瓶子), and, if you like, what to paint; "
                       "everything else stays exactly as it is"),
    N_("help_extend", "extend the canvas to a shape (9:16) or by pixels on each side "
                      "(left=256 right=256), the new area painted; the image itself stays "
                      "exactly as it is"),
    N_("help_keep", "approve (keep) an image (⭐), with a remark if you like: picks are the "
                    "approved images"),
    N_("help_reject", "reject an image (👎), with the reason if you like"),
    N_("help_unkeep", "take an image's review back"),
    N_("help_changes", "request changes to an image: the words become an edit of it (or a new "
                       "try), queued as its owner's"),
    N_("help_signoff", "sign a batch off once every image of it is reviewed"),
    N_("help_reopen", "take a batch's sign-off back (admins)"),
    N_("help_move", "move a batch's waiting jobs (or one job) to the front or the back of its "
                    "submitter's waiting jobs (admins); other people's turns stay as they were"),
    N_("help_retry", "run a batch's failed jobs again"),
    N_("help_pause", "stop starting new jobs (admins); running jobs finish"),
    N_("help_resume", "start jobs again (admins)"),
    N_("help_doctor", "admins: leased jobs that show no sign of life; hand them back to the queue"),
    N_("help_templates", "the templates you can use"),
    N_("help_template", "a template's columns, with an example sheet; admins: import NAME makes "
                        "one from a ComfyUI workflow or PNG you sent"),
    N_("help_grant", "give a user a role, and with --priority a more urgent priority than the "
                     "role's (admins)"),
    N_("help_revoke", "take a user's granted role away (admins)"),
    N_("help_schedule", 'run a sheet on a cron, e.g. "0 9 * * 1-5" (admins)'),
    N_("help_schedules", "the recurring batches"),
    N_("help_unschedule", "stop a recurring batch (admins)"),
    N_("help_help", "this list, or one command's usage"),
    # Words used inside other messages.
    N_("language_name", "English"),
    N_("list_separator", ", "),
    N_("role_admin", "admin"),
    N_("role_submitter", "submitter"),
    N_("role_reviewer", "reviewer"),
    N_("role_viewer", "viewer"),
    N_("role_none", "none"),
    N_("need_comfy", "ComfyUI template {name}"),
    N_("need_model", "model {need}"),
    N_("download_network", "the network connection failed"),
    N_("download_redirects", "too many redirects"),
    N_("file_unparsable", "the file's structure cannot be parsed"),
    N_("not_served", "genbot does not serve this channel; ask an admin."),
    # What a file turns out to be (bot.intake.sheets tells them apart).
    N_("kind_png", "a PNG image"),
    N_("kind_jpeg", "a JPEG image"),
    N_("kind_gif", "a GIF image"),
    N_("kind_pdf", "a PDF document"),
    N_("kind_rar", "a RAR archive"),
    N_("kind_7z", "a 7-Zip archive"),
    N_("kind_gzip", "a gzip archive"),
    N_("kind_xml", "an XML document"),
    N_("kind_binary", "binary data"),
    N_("kind_word", "a Word document"),
    N_("kind_powerpoint", "a PowerPoint file"),
    N_("kind_xlsx", "an .xlsx workbook"),
    N_("kind_xls", "an .xls workbook"),
    N_("kind_ods", "an .ods spreadsheet"),
    N_("kind_csv", "a text table (CSV)"),
    N_("kind_rows", "rows"),
    N_("kind_columns", "columns"),
    # An example sheet (genbot template example, /template NAME).
    N_("sheet_rows", "rows"),
    N_("sheet_help", "help"),
    N_("sheet_column", "column"),
    N_("sheet_type", "type"),
    N_("sheet_required", "required"),
    N_("sheet_default", "default"),
    N_("sheet_allowed", "allowed"),
    N_("sheet_aliases", "also accepted as"),
    N_("sheet_about", "help"),
    N_("sheet_yes", "yes"),
    N_("sheet_no", "no"),
    # The states and priorities every front names (their registries: storage.records Status,
    # Priority, DOINGS; storage.workers STATES; bot.web.webhooks State).
    N_("state_queued", "queued"),
    N_("state_running", "running"),
    N_("state_succeeded", "succeeded"),
    N_("state_failed", "failed"),
    N_("state_canceled", "canceled"),
    N_("priority_urgent", "urgent"),
    N_("priority_high", "high"),
    N_("priority_normal", "normal"),
    N_("priority_low", "low"),
    N_("delivery_pending", "pending"),
    N_("delivery_sent", "sent"),
    N_("delivery_failed", "failed"),
    N_("worker_idle", "idle"),
    N_("worker_busy", "busy"),
    N_("worker_stopped", "stopped"),
    N_("worker_lost", "lost"),
    N_("doing_building_demo", "building demo models: {models}"),
    N_("doing_loading", "loading {models}"),
    N_("doing_server_down", "server down: {models}"),
    # The dashboard's words (bot/web/static/app.js reads them from GET /vocabulary).
    N_("dash_overview", "Overview"),
    N_("dash_jobs", "Jobs"),
    N_("dash_submit", "Submit"),
    N_("dash_sign_out", "Sign out"),
    N_("dash_sign_in", "Sign in"),
    N_("dash_token", "API token"),
    N_("dash_sign_in_hint", "Use a token from [api] tokens in the service's config — on a fresh "
                            "install with none, the admin token in data/local-admin.token on the "
                            "service's machine."),
    N_("dash_live", "live"),
    N_("dash_offline", "reconnecting…"),
    N_("dash_queue", "Queue"),
    N_("dash_running_state", "Running"),
    N_("dash_paused_state", "Paused"),
    N_("dash_paused_by", "paused by {by}"),
    N_("dash_pause", "Pause"),
    N_("dash_resume", "Resume"),
    N_("dash_admins_only", "Admins only"),
    N_("dash_eta", "Queue clears in about {t}"),
    N_("dash_eta_unknown", "No estimate yet"),
    N_("dash_now_running", "Running now"),
    N_("dash_nothing_running", "Nothing is running."),
    N_("dash_recent", "Recent batches"),
    N_("dash_no_batches", "No batches yet."),
    N_("dash_batch", "Batch {id}"),
    N_("dash_template", "Template"),
    N_("dash_submitter", "Submitter"),
    N_("dash_priority", "Priority"),
    N_("dash_created", "Created"),
    N_("dash_progress", "Progress"),
    N_("dash_row", "Row"),
    N_("dash_version", "Version"),
    N_("dash_axis", "Swept value (steps=30, variant=B)"),
    N_("dash_status", "Status"),
    N_("dash_job", "Job"),
    N_("dash_enqueued", "Queued at"),
    N_("dash_took", "Took"),
    N_("dash_error", "Error"),
    N_("dash_all", "All"),
    NP_("dash_n_jobs", "{count} job", "{count} jobs"),
    N_("dash_loading", "loading…"),
    N_("dash_cancel", "Cancel"),
    N_("dash_cancel_batch", "Cancel batch"),
    N_("dash_retry", "Retry failed"),
    N_("dash_contact", "Contact sheet"),
    N_("dash_results", "Results (.xlsx)"),
    N_("dash_done_of", "{done} of {total} done"),
    N_("dash_step", "step {step}/{total}"),
    N_("dash_forming", "the image forming (live preview)"),
    N_("dash_sheet", "Sheet (.xlsx, .xls, .ods, .csv)"),
    N_("dash_pictures", "Pictures the sheet names (optional)"),
    N_("dash_not_before", "Start at (optional, e.g. 22:00 or 2026-12-24 09:00)"),
    N_("dash_skip_invalid", "Skip invalid rows"),
    N_("dash_send", "Submit batch"),
    N_("dash_sending", "Submitting…"),
    N_("dash_params", "Columns this template reads"),
    N_("dash_required", "required"),
    N_("dash_optional", "optional"),
    N_("dash_default", "default {v}"),
    N_("dash_problems", "The sheet has problems; nothing was queued:"),
    NP_("dash_submitted", "Batch {id} queued: {count} job", "Batch {id} queued: {count} jobs"),
    N_("dash_canceled_n", "Canceled {n}"),
    N_("dash_asked_n", "running jobs asked to stop: {n}"),
    N_("dash_load_more", "Load more"),
    N_("dash_refused", "Refused"),
    N_("dash_demo_note", "Demo model ({models}) — images are noise; for real ones: genbot docs "
                         "models."),
    N_("dash_unplaced_note", "Waiting: no running executor can run {what} — {why}"),
    N_("dash_workers", "Executors"),
    N_("dash_no_workers", "No executor is running: queued jobs wait until one starts."),
    N_("dash_seen", "seen {t} ago"),
    N_("dash_takes", "takes"),
    N_("dash_platforms", "Chat platforms"),
    N_("dash_no_platforms", "No chat platform configured — genbot chat works in a terminal."),
    N_("dash_arrives", "messages arrive by {how}"),
    N_("dash_signed_in", "✓ signed in"),
    N_("dash_not_signed_in", "✗ cannot sign in: {why}"),
    N_("dash_sign_in_unknown", "signed in: not known yet"),
    N_("dash_connection_up", "connection up"),
    N_("dash_connection_down", "connection down"),
    N_("dash_connection_none", "connection — (messages come to this service)"),
    N_("dash_owed", "messages owed: {n}"),
    N_("dash_failed_messages", "failed: {n}"),
    N_("dash_keep", "Keep"),
    N_("dash_unkeep", "Unkeep"),
    N_("dash_kept", "kept"),
    N_("dash_rejected", "rejected"),
    N_("dash_lineage", "Lineage"),
    N_("dash_reject", "Reject"),
    N_("dash_download", "Download original"),
    N_("dash_image", "Image"),
    N_("dash_previous", "Previous image"),
    N_("dash_next_image", "Next image"),
    N_("dash_zoom", "Zoom 100%"),
    N_("dash_close", "Close"),
    N_("dash_instruction_label", "instruction"),
    N_("dash_model", "model"),
    N_("dash_waited", "waited"),
    N_("dash_ran", "ran"),
    N_("dash_remake", "Make it again (the API call)"),
    N_("dash_copy", "Copy"),
    N_("dash_copied", "Copied"),
    N_("dash_zip", "Images (.zip)"),
    N_("dash_sign_in_slack", "Sign in with Slack"),
    N_("dash_sign_in_dingtalk", "Sign in with DingTalk"),
    N_("dash_signin_denied", "The sign-in was not allowed on the platform's page."),
    N_("dash_signin_state", "That sign-in had expired or was not started here: try again."),
    N_("dash_signin_team", "That Slack workspace is not this service's."),
    N_("dash_signin_slack", "Slack did not confirm who you are: try again, or sign in with a "
                            "token."),
    N_("dash_signin_dingtalk", "DingTalk did not confirm who you are: try again, or sign in "
                               "with a token."),
    N_("dash_signin_org", "You are not in this service's DingTalk organisation."),
    N_("dash_gallery", "Gallery"),
    N_("dash_review", "Review"),
    N_("dash_stars_at_least", "Stars"),
    NP_("dash_n_images", "{count} image", "{count} images"),
    N_("dash_move_front", "To the front of its submitter's queue"),
    N_("dash_move_back", "To the back"),
    N_("dash_moved", "{count} waiting jobs moved; other people's turns are as they were"),
    N_("dash_by_sheet", "A sheet"),
    N_("dash_by_rows", "Rows typed here"),
    N_("dash_add_row", "Add a row"),
    N_("dash_row_n", "Row {n}"),
    N_("dash_no_rows", "Fill in at least one row."),
    N_("dash_sweep", "Sweep and A/B (optional)"),
    N_("dash_axes", "Vary (KEY=V1,V2 or KEY=START..STOP:STEP, one axis a box)"),
    N_("dash_add_axis", "Add an axis"),
    N_("dash_seeds", "Seeds per row"),
    N_("dash_grid", "Grid axes (across, down)"),
    N_("dash_compare_with", "Compare with (other templates or versions, NAME@N)"),
    N_("dash_compare", "Compare ({count})"),
    N_("dash_compare_title", "Side by side"),
    N_("dash_compare_pick", "Pick two to four images to compare: C on each (Shift+C opens them)"),
    N_("dash_before_after", "Before / after"),
    N_("dash_before", "before"),
    N_("dash_after", "after"),
    N_("dash_zip_approved", "Approved images (.zip)"),
    N_("dash_deliverables", "Channel files that ship (.zip)"),
    N_("dash_channels", "Sales channels (each row's image made into their files)"),
    N_("dash_layout", "Layout on their files (headline, price, badge, logo: launch …)"),
    N_("dash_filled_sheet", "Your sheet, filled in"),
    N_("dash_ships", "ready to ship"),
    N_("dash_held", "held until its image is approved"),
    N_("dash_request_changes", "Request changes"),
    N_("dash_reject_why", "Why is it rejected? (optional)"),
    N_("dash_changes_what", "What should change? (queued as an edit of the image)"),
    N_("dash_undone", "Undone"),
    N_("dash_stars", "{count} of 5 stars"),
    N_("dash_reviewed_of", "{reviewed} of {total} images reviewed"),
    N_("dash_signed_off", "Signed off by {by}, {when}"),
    N_("dash_sign_off", "Sign off"),
    N_("dash_reopen", "Reopen"),
    N_("dash_review_keys", "Keys: P approve · X reject (Shift+X with a reason) · R request "
                           "changes · U unreviewed · 1-5 stars · arrows move · Ctrl+Z undo · "
                           "Enter large · C pick to compare (Shift+C compare) · B before/after"),
    N_("dash_made_from", "{action} of #{id}"),
    N_("dash_instruction", "Change it in a sentence…"),
    N_("dash_paint_title", "Paint where to repaint"),
    N_("dash_brush", "Brush"),
    N_("dash_eraser", "Eraser"),
    N_("dash_rectangle", "Rectangle"),
    N_("dash_brush_size", "Size"),
    N_("dash_clear", "Clear"),
    N_("dash_paint_what", "What to paint there (optional)"),
    N_("dash_paint_nothing", "Paint the region to repaint first, or name it in words."),
    N_("dash_region_words", "Or name the region in words (the bottle)"),
    N_("dash_extend_to", "Extend the canvas"),
    N_("dash_grow_nothing", "Drag a side out, or pick a shape, first."),
    N_("dash_ancestors", "Made from"),
    N_("dash_children", "Made from it"),
    N_("dash_none", "none"),
    N_("dash_batch_from", "{action} of job {job}, from"),
    N_("dash_kept_only", "Kept only (with all made from this batch)"),
    N_("dash_as_grid", "As a grid (the swept values labelled)"),
    NP_("dash_ab_won", "{variant}: kept in {count} row where the other was not",
        "{variant}: kept in {count} rows where the other was not"),
    N_("dash_ab_ties", "tie (both or neither kept): {ties}"),
    NP_("dash_ab_unrated", "not rated yet: {count} row", "not rated yet: {count} rows"),
    N_("dash_picks", "Picks (.xlsx)"),
    N_("dash_picks_contact", "Picks contact sheet"),
    N_("dash_no_picks", "Nothing kept yet."),
    NP_("dash_acted", "Batch {id} queued: {count} job", "Batch {id} queued: {count} jobs"),
    N_("dash_webhooks", "Webhooks"),
    N_("dash_endpoints", "Endpoints"),
    N_("dash_deliveries", "Deliveries"),
    N_("dash_endpoint", "Endpoint"),
    N_("dash_url", "URL"),
    N_("dash_kind", "Kind"),
    N_("dash_kind_config", "config"),
    N_("dash_kind_callback", "callback URL"),
    N_("dash_events", "Events"),
    N_("dash_delivery_id", "Delivery"),
    N_("dash_event", "Event"),
    N_("dash_attempts", "Attempts"),
    N_("dash_last_error", "Last error"),
    N_("dash_updated", "Updated"),
    N_("dash_next_attempt", "Next attempt"),
    N_("dash_all_endpoints", "All endpoints"),
    N_("dash_disabled", "disabled"),
    N_("dash_send_test", "Send test"),
    N_("dash_enable", "Enable"),
    N_("dash_redeliver", "Redeliver"),
    N_("dash_more", "More"),
    N_("dash_no_endpoints", "No webhook endpoints yet: add [[webhooks]] to the config "
                            "(genbot docs webhooks)."),
    N_("dash_no_deliveries", "No deliveries."),
    N_("dash_test_taken", "{endpoint} took the test (HTTP {response})"),
    N_("dash_test_not_taken", "{endpoint} did not take the test: {error}"),
    N_("dash_redelivered", "Delivery {id} taken (HTTP {response})"),
    N_("dash_not_redelivered", "Delivery {id} not taken: {error}"),
    N_("dash_still_pending", "Delivery {id} is still pending: it is sent on its own"),
    N_("dash_enabled", "{endpoint} is on again"),
    N_("dash_was_enabled", "{endpoint} was on already"),
)


BAR = 20  # characters in a progress bar


# A bar's segments by outcome, in order: images made, failed, canceled; then what is to come.
BAR_MADE, BAR_FAILED, BAR_CANCELED, BAR_TO_COME = "█", "▓", "▒", "░"


def bar(total: int, made: int = 0, failed: int = 0, canceled: int = 0) -> str:
    """Progress as people read it, each outcome its own segment — ██████▓▒▒░░░░ — so a
    batch that was canceled never reads as a full bar of images."""
    if not total:
        return BAR_MADE * BAR
    bounds = [round(BAR * n / total) for n in (made, made + failed, made + failed + canceled)]
    return (BAR_MADE * bounds[0] + BAR_FAILED * (bounds[1] - bounds[0])
            + BAR_CANCELED * (bounds[2] - bounds[1]) + BAR_TO_COME * (BAR - bounds[2]))


class Localized(str):
    """A detail that is itself words, told in the reader's language where a message uses
    it; as a str it is its English (a log line, the details of an API error)."""

    def render(self, lang: str) -> str:
        return str(self)


class Phrase(Localized):
    """A message used inside another: "a PNG image", "model sdxl". With `source`, the
    English is that text as it was given (a library's own account of an error) and
    other languages read the message."""

    code: str
    details: dict[str, Any]
    source: str | None

    def __new__(cls, code: str, /, *, source: str | None = None, **details: Any) -> Phrase:
        made = super().__new__(cls, source if source is not None else
                               say(code, i18n.SOURCE, **details))
        made.code, made.details, made.source = code, details, source
        return made

    def render(self, lang: str) -> str:
        if self.source is not None and i18n.languages().code(lang) == i18n.SOURCE:
            return self.source
        return say(self.code, lang, **self.details)


class Joined(Localized):
    """Details listed in the reader's way: "model a, model b"; "模型 a、模型 b"."""

    parts: tuple[str, ...]

    def __new__(cls, parts: Iterable[str]) -> Joined:
        parts = tuple(parts)
        made = super().__new__(cls, say("list_separator", i18n.SOURCE).join(parts))
        made.parts = parts
        return made

    def render(self, lang: str) -> str:
        return say("list_separator", lang).join(
            p.render(lang) if isinstance(p, Localized) else p for p in self.parts)


ROLE_DETAILS = ("role", "needed")  # details that name a role (role_NAME: in the reader's words)

CONTROL = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v", "\f": "\\f", "\x00": "\\0"}


def visible(text: str) -> str:
    """Text from a cell or a header, safe to quote in a sentence: control characters
    (a NUL, a vertical tab, a line break inside a header) shown as escapes."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch == " " else
                   CONTROL.get(ch, f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else
                               f"\\u{ord(ch):04x}") for ch in text)


def canceled(lang: str, count: int) -> str:
    """", 2 canceled" where any were: a canceled job is not a failed one."""
    return say("and_canceled", lang, canceled=count) if count else ""


def took(lang: str, seconds: float) -> str:
    """A duration as people read it: seconds under two minutes, else minutes."""
    if seconds < 120:
        return say("took_seconds", lang, seconds=max(seconds, 1 if seconds > 0 else 0))
    return say("took_minutes", lang, minutes=seconds / 60)


def review_summary(counts: Mapping[Review, int], lang: str = "en") -> str:
    """A batch's images by review, in the table's order: "3 approved, 1 rejected"."""
    return ", ".join(say("review_count", lang, count=counts[r], state=say(f"review_{r}", lang))
                     for r in Review if counts.get(r))


def action_label(name: str, lang: str = "en") -> str:
    """An image action as a button reads: its icon and its verb ("🔁 Again")."""
    spec = ACTIONS.get(name)
    if spec is None:  # (a job made by an action since taken out of the table)
        return name
    return f"{spec.icon} {say(spec.verb, lang)}".strip()


def unfilled(code: str, lang: str = "en") -> str:
    """The message for `code` in `lang` with its {placeholders} left for whoever fills
    them (the dashboard, from what the API answers)."""
    return i18n.text(code, CATALOG[code], lang)


def unfilled_forms(code: str, lang: str = "en") -> dict[str, str]:
    """A message that follows a number (NP_): its words in `lang` for each of the
    language's plural categories ("one", "other" …: CLDR's, as JavaScript's
    Intl.PluralRules names them), {placeholders} left — the dashboard picks by count."""
    rule = i18n.plural_category(lang)
    forms: dict[str, str] = {}
    for count in range(1000):  # until each category has a count (one only past 999, as
        if len(forms) > len(rule.tags):  # French "many", is left: the page reads "other")
            break
        forms.setdefault(rule(count),
                         i18n.plural(code, CATALOG[code], PLURALS[code], count, lang))
    return forms


def say(code: str, lang: str = "en", **details: Any) -> str:
    """The message for `code` in `lang` (any tag bot.i18n reads: "en", "zh", "zh-CN"; a
    language not offered reads English): plain text, the details as they were given. It
    is written as it reads (an API error, a CLI line, a label in results.xlsx); a chat
    adapter escapes it for its platform as it posts it (bot.chat.markup), so a detail
    from a person, a file or a server can never be markup there."""
    if code in PLURALS:  # its words follow its count
        template = i18n.plural(code, CATALOG[code], PLURALS[code], details["count"], lang)
    else:
        template = i18n.text(code, CATALOG[code], lang)
    details = {k: v.render(lang) if isinstance(v, Localized) else v
               for k, v in details.items()}
    if code != "bad_role":  # a role is named in the reader's language
        details |= {k: say(f"role_{details[k]}", lang) for k in ROLE_DETAILS
                    if isinstance(details.get(k), str) and f"role_{details[k]}" in CATALOG}
    if "choices" in details and not isinstance(details["choices"], str):
        details = {**details, "choices": ", ".join(map(str, details["choices"]))}
    return template.format(**details)


# What a file turns out to be (bot.intake.sheets tells them apart).
KINDS = {kind: Phrase(f"kind_{kind.lstrip('.')}") for kind in (
    "png", "jpeg", "gif", "pdf", "rar", "7z", "gzip", "xml", "binary", "word", "powerpoint",
    ".xlsx", ".xls", ".ods", ".csv", "rows", "columns")}
