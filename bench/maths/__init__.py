"""Leaf maths shared by every scenario and the reports: percentiles and step-time spread (stats),
bootstrap and t intervals (confidence). numpy only; imports nothing of bench's."""
