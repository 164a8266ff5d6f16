"""A notes agent: it saves short notes for each user and reads them back.

The platform runs the few-shots below with its LLM and calls the Funcs over HTTP;
notes live in the platform's per-user storage, so each user sees only their own.
"""

from codeshot.sdk import CodeShotAgent, Message, UserStorage

BASE_PROMPT = "I am a notes agent. I save short notes for you and read them back."

# Each few-shot teaches one kind of question: Q, then the Func calls, then A.
FEW_SHOTS = """
Q: Save a note: buy milk
Ask Func[add_note]: buy milk
Func[add_note] says: Saved note 1: buy milk
A: Saved note 1: buy milk

Q: What are my notes?
Ask Func[list_notes]: all
Func[list_notes] says: 1. buy milk
A: Your notes: 1. buy milk
"""

agent = CodeShotAgent(BASE_PROMPT, FEW_SHOTS)


@agent.register_func
def add_note(query: Message, user_storage: UserStorage) -> str:
    """Save the text as a new note."""
    notes = [*user_storage.get("notes", []), query.text.strip()]
    user_storage["notes"] = notes
    return f"Saved note {len(notes)}: {notes[-1]}"


@agent.register_func
def list_notes(user_storage: UserStorage) -> str:
    """All of the user's notes, numbered."""
    notes = user_storage.get("notes", [])
    return "\n".join(f"{i}. {note}" for i, note in enumerate(notes, 1)) or "You have no notes."
