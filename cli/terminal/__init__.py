"""A person at this terminal, typing: the room of the CLI that reads what is typed as it comes.
Lines are read without blocking the loop, and Ctrl-C is counted rather than fatal (`keyboard`);
a line answers the plan or the tool call that waits (`answers`); and `chat` holds a
conversation, a turn a line, a line typed mid-turn steering it. The rest of the CLI parses
command lines and prints runs, and asks this room for what a person types (a prompt piped whole
on stdin, `-`, is read by args.py)."""
