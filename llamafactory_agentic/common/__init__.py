# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""The bottom layer: what every other subpackage may import (logging); it imports no other part of the plugin."""
