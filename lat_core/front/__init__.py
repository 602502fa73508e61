"""The front ends' side of the core: the client (the one door), run creation, plans and their
expansion into jobs, rerun. Runs in the front end's process (the TUI, headless, a CLI verb); the
engine never imports it."""
