"""The node agent: discovers the node's resources, runs the tasks the controller sends, reports back.

Run it with `python -m corral.agent --controller URL --secret-file PATH --node NAME`.
"""
