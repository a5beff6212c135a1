import sys

from bot.cli.genbot import main

sys.exit(main())
