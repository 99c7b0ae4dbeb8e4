"""What plan3d shows: the tables and text (render, the only module that imports rich), the
pipeline timeline pictures, and the JSON Schema of each command's --json output."""
