"""The event-folding engine: stimuli in, state changes and commands out. Sans-IO; `now` is an input."""
