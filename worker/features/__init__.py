"""What a controller sees of one row (SPEC §6): each candidate set against the state, as named
numbers. One module per way of reading a state; `kinds.py` is the table of the names they make.
"""
