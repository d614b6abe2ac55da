"""Analyses of decoding records: estimates and their standard errors written once, the typed tables every
surface writes (text, markdown, HTML by render/table.py), and what a session, a scan, a run comparison, an
evaluation, the doctor and ExitTrain's before/after say. Plain Python, no torch: it reads engine/records/."""
