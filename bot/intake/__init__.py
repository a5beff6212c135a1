"""Spreadsheet intake: a sheet read whatever people send (sheets), the pictures its
cells name fetched and checked (images), every row checked against a template (check)."""
