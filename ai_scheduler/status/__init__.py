"""`ai-scheduler status` (= `kubectl ai-scheduler`): the scheduler for its users, with their own credentials.

- `command.py`: the sub-commands and their flags, and the kubectl plugin's entry point;
- `actions.py`: the requests, to the visibility API (reads) and to pods and PodGroups (writes);
- `tables.py`: the readable text of what the visibility API answers.
"""
